package plugins_test

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/plugins/sdk/conformance"
	"github.com/specula-dev/specula/registry"
)

// The block drafts of the helper plugin pass the conformance kit: feature
// rows and proposals cross a real gRPC connection, and the plugin runs the
// speculation package's BlockDrafter.
func TestConformanceBlockDrafts(t *testing.T) {
	conformance.Run(t, helperPlugin(""), conformance.Options{Target: targetSpec})
}

// lookupProposer proposes the token that followed the anchor's latest
// earlier occurrence, repeatedly (a tiny prompt-lookup draft).
type lookupProposer struct{}

func (lookupProposer) Propose(ctx []int32, anchor int32, max int) []int32 {
	var out []int32
	seq := append(slices.Clip(ctx), anchor)
	for len(out) < max {
		last := seq[len(seq)-1]
		found := -1
		for j := len(seq) - 2; j >= 0; j-- {
			if seq[j] == last {
				found = j
				break
			}
		}
		if found < 0 {
			break
		}
		out = append(out, seq[found+1])
		seq = append(seq, seq[found+1])
	}
	return out
}

// A token-level draft needs no MLX in the plugin, so the whole speculation
// core can drive it through the host proxy over an in-process connection:
// greedy output equals plain decoding.
func TestInProcessTokenDraftGreedyEqualsPlain(t *testing.T) {
	p := sdk.Plugin{Name: "lookup", Version: "0.1.0", Architectures: []sdk.Architecture{
		sdk.TokenDraft("Lookup", 4, func(*sdk.LoadConfig) (sdk.Proposer, error) { return lookupProposer{}, nil }),
	}}
	target := newTarget()
	d, err := plugins.Connect(conformance.Serve(t, p), plugins.ConnectOptions{
		Name: "lookup", Architecture: "Lookup", Target: target, Selector: true,
		Checkpoint: registry.Config{Dir: checkpoint(t), JSON: []byte("{}")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := generate(t, target, nil, prompt, 60)
	got, st := generate(t, target, d, prompt, 60)
	if !slices.Equal(got.Tokens, want.Tokens) {
		t.Fatalf("through the plugin %v, plain %v", got.Tokens, want.Tokens)
	}
	if st.DraftRounds == 0 {
		t.Fatalf("no draft rounds: %+v", st)
	}
	t.Logf("%d rounds, %d drafted, %d accepted", st.Iterations, st.Drafted, st.Accepted)
}
