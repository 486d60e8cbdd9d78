package dflash

import (
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// Every rule of spec/dflash.md 3.2, each broken alone, against a fake
// target shaped like qwen35-tiny (hidden 64, vocabulary 512, 4 layers).
func TestAttachTargetValidation(t *testing.T) {
	tiny := func() *fakeTarget { return &fakeTarget{hidden: 64, vocab: 512, layers: 4} }
	for _, tc := range []struct {
		name   string
		edit   func(top, dc map[string]any)
		target *fakeTarget
		want   string // in the error; "" = accepted
	}{
		{"the fixture pair fits", nil, tiny(), ""},
		{"3.2.2 hidden size differs", nil, &fakeTarget{hidden: 32, vocab: 512, layers: 4}, "hidden_size 64 differs from the target's hidden size 32"},
		{"3.2.3 vocabulary differs", nil, &fakeTarget{hidden: 64, vocab: 1024, layers: 4}, "vocab_size 512 differs from the target's vocabulary 1024"},
		{"3.2.3 absent vocab_size is not checked", func(top, dc map[string]any) { delete(top, "vocab_size") }, &fakeTarget{hidden: 64, vocab: 1024, layers: 4}, ""},
		{"3.2.4 mask token outside the vocabulary", func(top, dc map[string]any) { dc["mask_token_id"] = 512 }, tiny(), "mask_token_id 512 is outside the target's vocabulary [0, 512)"},
		{"3.2.5 taps empty", func(top, dc map[string]any) { dc["target_layer_ids"] = []int{} }, tiny(), "is empty"},
		{"3.2.5 negative tap", func(top, dc map[string]any) { dc["target_layer_ids"] = []int{-1, 2} }, tiny(), "negative id -1"},
		{"3.2.5 taps descending", func(top, dc map[string]any) { dc["target_layer_ids"] = []int{2, 0} }, tiny(), "strictly ascending"},
		{"3.2.5 duplicate tap", func(top, dc map[string]any) { dc["target_layer_ids"] = []int{2, 2} }, tiny(), "strictly ascending"},
		{"3.2.5 last tap beyond the target", func(top, dc map[string]any) { dc["target_layer_ids"] = []int{0, 4} }, tiny(), "tap 4, which is not below the target's 4 layers"},
		{"3.2.6 num_target_layers differs", func(top, dc map[string]any) { top["num_target_layers"] = 36 }, tiny(), "num_target_layers 36 differs from the target's 4 layers"},
		{"3.2.6 num_target_layers 0 is not checked", func(top, dc map[string]any) { top["num_target_layers"] = 0 }, tiny(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := dflashtest.Load(t, "dflash-tiny").Config
			if tc.edit != nil {
				data = edit(t, tc.edit)
			}
			cfg, err := ParseConfig(data)
			if err != nil {
				t.Fatal(err)
			}
			d, err := NewFromConfig(cfg, mlx.Float32, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = d.AttachTarget(tc.target)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want == "":
				// 3.2.7: the taps are set on the target.
				if !slices.Equal(tc.target.taps, cfg.TargetLayerIDs) || d.Target() != tc.target {
					t.Errorf("target taps %v, want %v", tc.target.taps, cfg.TargetLayerIDs)
				}
			case err == nil:
				t.Fatalf("accepted, want an error containing %q", tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			case tc.target.taps != nil:
				t.Errorf("taps %v were set on a target the draft does not fit", tc.target.taps)
			}
		})
	}
}

// 3.2.1: a target without the draft-target capability.
func TestAsDraftTarget(t *testing.T) {
	if _, err := AsDraftTarget(plainModel{}); err == nil || !strings.Contains(err.Error(), "needs a target with the draft-target capability; dflash.plainModel does not provide it") {
		t.Errorf("got %v", err)
	}
	if dt, err := AsDraftTarget(&fakeTarget{}); err != nil || dt == nil {
		t.Errorf("a DraftTarget was refused: %v", err)
	}
	d := &Draft{cfg: &Config{}}
	if err := d.AttachTarget(nil); err == nil {
		t.Error("a nil target was accepted")
	}
}

// plainModel is a model.Model without the DraftTarget methods.
type plainModel struct{ model.Model }
