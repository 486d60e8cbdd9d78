package plugins_test

import (
	"context"
	"testing"

	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/plugins/sdk/conformance"
)

// A Load with check_only builds the draft (its constructor is told so),
// answers as a real Load does, and keeps nothing: the same process then
// accepts the real Load.
func TestLoadCheckOnlyKeepsNothing(t *testing.T) {
	var sawCheck []bool
	p := sdk.Plugin{Name: "helper", Version: "1.0.0", Architectures: []sdk.Architecture{
		sdk.BlockDraft("ChainDraft", func(cfg *sdk.LoadConfig) (*chainDraft, error) {
			sawCheck = append(sawCheck, cfg.CheckOnly)
			return newChainDraft(5), nil
		}),
	}}
	conn := conformance.Serve(t, p)
	req := &draftv1.LoadRequest{
		Architecture: "ChainDraft", CheckpointDir: checkpoint(t), ConfigJson: []byte("{}"), Dtype: "float32", Device: "cpu",
		Target: &draftv1.TargetInfo{HiddenSize: int64(targetSpec.Hidden), VocabSize: int64(targetSpec.Vocab), NumLayers: int64(targetSpec.Layers)},
	}
	req.CheckOnly = true
	checked, err := conn.Load(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.CheckOnly = false
	loaded, err := conn.Load(context.Background(), req)
	if err != nil {
		t.Fatalf("the real Load after a check: %v", err)
	}
	if checked.GetBlockSize() != 5 || checked.GetMaxDepth() != loaded.GetMaxDepth() || checked.GetFeatureWidth() != loaded.GetFeatureWidth() {
		t.Fatalf("check answered %v, the real Load %v", checked, loaded)
	}
	if len(sawCheck) != 2 || !sawCheck[0] || sawCheck[1] {
		t.Fatalf("constructor saw CheckOnly %v, want [true false]", sawCheck)
	}
	if _, err := conn.Load(context.Background(), req); err == nil {
		t.Fatal("a second real Load was accepted")
	}
}
