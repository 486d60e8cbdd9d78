package gotiny_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	_ "github.com/specula-dev/specula/arch/all"
	"github.com/specula-dev/specula/arch/dflash"
	"github.com/specula-dev/specula/arch/dflash2"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/tokenizer"
)

// Parity of specula's forward with the training code's (transformers'
// Qwen3.5 and train/draft_model.py, float32 on the CPU) on the shipped
// family, against testdata/fixtures/go-tiny written by train/parity.py.
// Both sides run float32 over the same bfloat16 weights, so they differ only
// in summation order: measured, the logits agree to 1-2e-5 and their
// logsumexps to 6e-5 (|logit| up to ~30), the taps to 8e-7 of their scale.
// The tolerances leave about 10x room and still catch a wrong tap, position
// or norm (a last-layer tap taken before the final norm is off by 1.5 of the
// scale).
const (
	logitTol = 5e-4 // absolute, on logits and logsumexps
	tapTol   = 1e-5 // relative to the largest |tap|
)

type parityRef struct {
	Prompt        string  `json:"prompt"`
	PromptIDs     []int32 `json:"prompt_ids"`
	Anchor        int32   `json:"anchor"`
	Rows          int     `json:"rows"`
	Top           int     `json:"top"`
	Taps          []int   `json:"taps"`
	DFlashArgmax  []int32 `json:"dflash_argmax"`
	DFlash2Argmax []int32 `json:"dflash2_argmax"`
	SelectorPath  []int32 `json:"dflash2_selector_path"`
}

// weighted is what loads and holds weights: targets and drafts.
type weighted interface {
	model.WeightHolder
	LoadWeights(map[string]*mlx.Array) error
}

// build makes the architecture that folder dir's config.json names through
// the registry, as a program would, for float32 compute.
func build(t *mlxtest.T, dir string) any {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	t.NoErr(err)
	var arch struct {
		Architectures []string `json:"architectures"`
	}
	t.NoErr(json.Unmarshal(cfg, &arch))
	return qwen35test.Build(t, arch.Architectures[0], dir)
}

// load loads folder dir's weights (sharded or not) into m and evaluates them.
func load(t *mlxtest.T, dir string, m weighted) {
	t.Helper()
	qwen35test.LoadWeights(t, dir, m)
	t.NoErr(mlx.Eval(m.Weights()...))
}

// checkLogits compares rows of logits [R, V] with the reference's compact
// form: values at each row's top ids, the row's logsumexp, and the argmax
// where the reference's top two are apart by more than the tolerance.
func checkLogits(t *mlxtest.T, what string, logits *mlx.Array, dir string, ref *parityRef) {
	t.Helper()
	ids := t.Int32s(mlx.AsType(fixtures.Reference(t, dir, what+"_ids"), mlx.Int32))
	want := t.Float32s(fixtures.Reference(t, dir, what+"_values"))
	lse := t.Float32s(fixtures.Reference(t, dir, what+"_logsumexp"))
	got := t.Float32s(logits)
	rows := len(lse)
	V := len(got) / rows
	worst, worstLSE := 0.0, 0.0
	gotLSE := t.Float32s(mlx.LogSumExp(logits, false, -1))
	for r := range rows {
		for j := range ref.Top {
			d := math.Abs(float64(got[r*V+int(ids[r*ref.Top+j])] - want[r*ref.Top+j]))
			worst = max(worst, d)
		}
		worstLSE = max(worstLSE, math.Abs(float64(gotLSE[r]-lse[r])))
		if want[r*ref.Top]-want[r*ref.Top+1] > 2*logitTol {
			best := 0
			for v := range V {
				if got[r*V+v] > got[r*V+best] {
					best = v
				}
			}
			if int32(best) != ids[r*ref.Top] {
				t.Errorf("%s row %d: argmax %d, want %d", what, r, best, ids[r*ref.Top])
			}
		}
	}
	if worst > logitTol || worstLSE > logitTol {
		t.Errorf("%s: max |Δ| %.3g at the top %d ids, %.3g in logsumexp; tolerance %g", what, worst, ref.Top, worstLSE, logitTol)
	} else {
		t.Logf("%s: max |Δ| %.3g at the top %d ids, %.3g in logsumexp", what, worst, ref.Top, worstLSE)
	}
}

func TestParityWithTrainingCode(t *testing.T) {
	dir := fixtures.Dir(t, "go-tiny")
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref parityRef
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatalf("go-tiny/reference.json: %v", err)
	}
	tok, err := tokenizer.Load("tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(ref.Prompt, tokenizer.EncodeOptions{}); !slices.Equal(got, ref.PromptIDs) {
		t.Errorf("the tokenizer encodes the prompt as %v,\nthe tokenizers library as %v", got, ref.PromptIDs)
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		target := build(t, ".").(model.DraftTarget)
		load(t, ".", target.(weighted))
		d1 := build(t, "dflash").(*dflash.Draft)
		d2 := build(t, "dflash2").(*dflash2.Draft)
		for _, d := range []model.BlockDraft{d1, d2} {
			t.NoErr(d.(model.TargetUser).AttachTarget(target)) // sets the target's taps
		}
		load(t, "dflash", d1)
		load(t, "dflash2", d2)

		// The target over the prompt: logits of its last rows, and the taps.
		n := len(ref.PromptIDs)
		caches := target.NewCaches()
		hidden, taps := target.Forward(&model.Batch{
			InputIDs:     mlx.FromInt32s(ref.PromptIDs, 1, n),
			SeqOffsets:   []int{0},
			SeqQueryLens: []int{n},
		}, caches)
		last := func(a *mlx.Array) *mlx.Array { return mlx.SliceAxis(a, 1, n-ref.Rows, n) }
		checkLogits(t, "target_logits", target.Unembed(last(hidden)), dir, &ref)
		wantTaps := fixtures.Reference(t, dir, "taps")
		scale, err := mlx.Max(mlx.Abs(wantTaps), false).Item()
		t.NoErr(err)
		d, err := mlx.Max(mlx.Abs(mlx.Subtract(mlx.Squeeze(last(taps), 0), wantTaps)), false).Item()
		t.NoErr(err)
		if rel := float64(d / scale); rel > tapTol {
			t.Errorf("taps %v: max |Δ| %.3g of a scale %.3g (%.3g relative); tolerance %g", ref.Taps, d, scale, rel, tapTol)
		} else {
			t.Logf("taps %v: %.3g relative", ref.Taps, rel)
		}
		if got := t.Int32s(mlx.Argmax(mlx.SliceAxis(target.Unembed(hidden), 1, n-1, n), -1, false)); got[0] != ref.Anchor {
			t.Fatalf("the target's next token %d, want %d", got[0], ref.Anchor)
		}

		// One block anchored right after the prompt, every prompt row as
		// context, through each draft.
		block := func(d *dflash.Draft) (rows, logits *mlx.Array) {
			bs, mask := d.BlockParams()
			ids := []int32{ref.Anchor}
			for range bs - 1 {
				ids = append(ids, mask)
			}
			h, _ := d.Forward(&model.Batch{
				InputIDs:     mlx.FromInt32s(ids, 1, bs),
				SeqOffsets:   []int{0},
				SeqQueryLens: []int{bs},
				Hidden:       taps,
			}, nil, d.NewCaches())
			rows = mlx.SliceAxis(h, 1, 1, bs)
			return rows, d.Unembed(rows)
		}
		_, l1 := block(d1)
		checkLogits(t, "dflash_logits", mlx.Squeeze(l1, 0), dir, &ref)
		if got := t.Int32s(mlx.Argmax(l1, -1, false)); !slices.Equal(got, ref.DFlashArgmax) {
			t.Errorf("DFlash's argmax %v, want %v", got, ref.DFlashArgmax)
		}
		rows, l2 := block(d2.Draft)
		checkLogits(t, "dflash2_logits", mlx.Squeeze(l2, 0), dir, &ref)
		choose := sample.New(sample.Options{}, nil).Choose
		path, _, _ := d2.Select(rows, l2, mlx.FromInt32s([]int32{ref.Anchor}, 1), choose)
		if got := t.Int32s(path); !slices.Equal(got, ref.SelectorPath) {
			t.Errorf("DFlash2's selector path %v, want %v", got, ref.SelectorPath)
		}
	})
}
