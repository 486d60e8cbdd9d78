package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/speculation"
)

// Chained rounds over the real caches (KV and recurrent; dense and MoE
// targets): an oracle that proposes the target's greedy continuation with
// a token wrong now and then lets rounds pass whole (the next round,
// verified before their verdict was read, is kept) and miss (it is
// dropped, and the round's caches go back to its accepted run from
// snapshots taken before the chained write). The output is the plain
// greedy one, and both outcomes happen.
func TestChainedRoundsOnRealCaches(t *testing.T) {
	for _, target := range []string{"qwen35-tiny", "qwen35moe-tiny"} {
		t.Run(target, func(t *testing.T) {
			ref := loadReference(t, target)
			e := load(t, writeManifestFor(t, target, "", ""))
			vocab := int32(e.Target().Info().VocabSize)
			for i, depth := range []int{3, 7, 3, 7} {
				prompt := ref.PromptIDs[i : 10+3*i]
				want, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 40}, nil)
				if err != nil {
					t.Fatal(err)
				}
				proposal := slices.Concat(prompt, want.IDs)
				// One wrong token every 2·depth+3 positions: a round of depth
				// drafts passes whole or meets one.
				for j := len(prompt) + depth + i; j < len(proposal); j += 2*depth + 3 {
					proposal[j] = (proposal[j] + 1) % vocab
				}
				got, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 40, Drafter: speculation.NewOracle(proposal, depth), FixedDepth: depth}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.IDs, want.IDs) {
					t.Fatalf("prompt %d, depth %d: chained %v, plain %v", i, depth, got.IDs, want.IDs)
				}
				st := got.Stats
				if kept := st.ChainedRounds - st.ChainedDropped; kept == 0 || st.ChainedDropped == 0 {
					t.Fatalf("prompt %d, depth %d: %d chained rounds, %d dropped; want some kept and some dropped", i, depth, st.ChainedRounds, st.ChainedDropped)
				}
				t.Logf("prompt %d, depth %d: %d drafting rounds, %d chained, %d dropped", i, depth, st.DraftRounds, st.ChainedRounds, st.ChainedDropped)
			}
		})
	}
}
