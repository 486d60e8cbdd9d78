package plugins_test

import (
	"context"
	"strings"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/plugins/sdk/conformance"
)

// cachelessDraft is a block draft without layers, hence without caches.
type cachelessDraft struct{ *chainDraft }

func (cachelessDraft) NewCaches() []cache.Cache { return nil }

// A block draft whose NewCaches returns no cache cannot be served (a draft
// session keeps its context offset in the first cache): Load refuses it,
// saying so, for a check as for a real load, instead of every session's
// Open failing with an index-out-of-range panic.
func TestLoadRefusesBlockDraftWithoutCaches(t *testing.T) {
	p := sdk.Plugin{Name: "helper", Version: "1.0.0", Architectures: []sdk.Architecture{
		sdk.BlockDraft("Cacheless", func(*sdk.LoadConfig) (cachelessDraft, error) { return cachelessDraft{newChainDraft(5)}, nil }),
	}}
	conn := conformance.Serve(t, p)
	for _, checkOnly := range []bool{true, false} {
		req := &draftv1.LoadRequest{
			Architecture: "Cacheless", CheckpointDir: checkpoint(t), ConfigJson: []byte("{}"), Dtype: "float32", Device: "cpu", CheckOnly: checkOnly,
			Target: &draftv1.TargetInfo{HiddenSize: int64(targetSpec.Hidden), VocabSize: int64(targetSpec.Vocab), NumLayers: int64(targetSpec.Layers)},
		}
		_, err := conn.Load(context.Background(), req)
		if err == nil || !strings.Contains(err.Error(), "NewCaches returned no cache") {
			t.Fatalf("check_only %v: Load error %v, want one saying NewCaches returned no cache", checkOnly, err)
		}
	}
}
