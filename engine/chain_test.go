package engine_test

import (
	"context"
	"math"
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

// A drafting round emits its accepted tokens at once, the first round
// among them: the decode rate leaves those out (they came with the first
// token, not after it), or an oracle accepting 7 of 7 would be credited
// with 8 tokens decoded in no time. Plain decoding emits one at a time.
func TestDecodeRateLeavesOutTheFirstRound(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	e := load(t, writeManifestFor(t, "qwen35-tiny", "", ""))
	prompt := ref.PromptIDs[:12]
	const tokens, depth = 24, 7
	plain, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: tokens}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.FirstEmitted != 1 {
		t.Fatalf("plain decoding: %d tokens with the first, want 1", plain.FirstEmitted)
	}
	oracle, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: tokens,
		Drafter: speculation.NewOracle(slices.Concat(prompt, plain.IDs), depth), FixedDepth: depth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(oracle.IDs, plain.IDs) {
		t.Fatalf("oracle %v, plain %v", oracle.IDs, plain.IDs)
	}
	if oracle.Stats.Accepted != oracle.Stats.Drafted {
		t.Fatalf("the oracle had %d of %d drafts accepted; this test needs every one", oracle.Stats.Accepted, oracle.Stats.Drafted)
	}
	// The first round: 7 drafts accepted, and the target's token after them.
	if oracle.FirstEmitted != depth+1 {
		t.Fatalf("oracle: %d tokens with the first, want %d", oracle.FirstEmitted, depth+1)
	}
	for _, r := range []*engine.Response{plain, oracle} {
		want := float64(tokens-r.FirstEmitted) / r.DecodeTime.Seconds()
		if got := r.TokensPerSecond(); math.Abs(got-want) > 1e-9*want {
			t.Errorf("%d tokens, %d with the first, decoded in %v: %.3f tok/s, want %.3f", tokens, r.FirstEmitted, r.DecodeTime, got, want)
		}
	}
}
