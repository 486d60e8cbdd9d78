package engine_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
)

// Pipelined decoding (plain steps dispatched one ahead, the next round's
// draft proposed before the host emits) gives what the unpipelined engine
// gives, and both give the fixture's reference: greedy ids, stop ids, an
// emit that stops the request, seeded sampled ids, for plain decoding and
// both drafts.
func TestPipelinedEqualsUnpipelined(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	for _, draft := range []string{"", "dflash-tiny", "dflash2-tiny"} {
		t.Run("draft="+draft, func(t *testing.T) {
			e := load(t, writeManifest(t, draft, "[speculation]\nmax_depth = 7\n"))
			both := func(name string, req engine.Request, onToken func(engine.Token) error) [2]*engine.Response {
				t.Helper()
				var out [2]*engine.Response
				var errs [2]error
				for i, off := range []bool{false, true} {
					r := req
					r.NoPipeline = off
					out[i], errs[i] = e.Generate(context.Background(), r, onToken)
				}
				if (errs[0] == nil) != (errs[1] == nil) || out[0] == nil || out[1] == nil {
					t.Fatalf("%s: pipelined error %v, unpipelined %v", name, errs[0], errs[1])
				}
				if !slices.Equal(out[0].IDs, out[1].IDs) || out[0].DoneReason != out[1].DoneReason {
					t.Fatalf("%s: pipelined %v (%q), unpipelined %v (%q)", name, out[0].IDs, out[0].DoneReason, out[1].IDs, out[1].DoneReason)
				}
				return out
			}
			// Greedy: transformers' continuation.
			got := both("greedy", engine.Request{IDs: ref.PromptIDs, MaxTokens: len(ref.GreedyIDs)}, nil)
			if !slices.Equal(got[0].IDs, ref.GreedyIDs) || got[0].DoneReason != "length" {
				t.Fatalf("greedy %v (%q), want %v", got[0].IDs, got[0].DoneReason, ref.GreedyIDs)
			}
			// Budgets that end inside a round, and short prompts.
			for i := range 8 {
				prompt := ref.PromptIDs[i%4 : 4+i]
				both("budget", engine.Request{IDs: prompt, MaxTokens: 1 + (i*5)%13}, nil)
			}
			// A stop id ends the request before it, in either mode.
			got = both("stop id", engine.Request{IDs: ref.PromptIDs, MaxTokens: 32, StopIDs: []int32{ref.GreedyIDs[5]}}, nil)
			if !slices.Equal(got[0].IDs, ref.GreedyIDs[:5]) || got[0].DoneReason != "stop" {
				t.Fatalf("stop id: %v (%q), want %v", got[0].IDs, got[0].DoneReason, ref.GreedyIDs[:5])
			}
			// An emit that fails stops the request at that token.
			stopErr := errors.New("client gone")
			var seen [][]int32
			emitted := 0
			got = both("emit error", engine.Request{IDs: ref.PromptIDs, MaxTokens: 32}, func(tok engine.Token) error {
				if emitted%100 == 0 {
					seen = append(seen, nil)
				}
				seen[len(seen)-1] = append(seen[len(seen)-1], tok.ID)
				if emitted++; emitted%100 == 4 {
					emitted = 100 * (emitted/100 + 1)
					return stopErr
				}
				return nil
			})
			if len(seen) != 2 || !slices.Equal(seen[0], ref.GreedyIDs[:4]) || !slices.Equal(seen[1], seen[0]) {
				t.Fatalf("emitted before the failing emit: %v, want %v twice", seen, ref.GreedyIDs[:4])
			}
			// Seeded sampling draws the same tokens (and both runs are full).
			seed := uint64(7)
			temp, topP := float32(0.9), float32(0.95)
			for _, budget := range []int{16, 7} {
				got = both("seeded", engine.Request{IDs: ref.PromptIDs, MaxTokens: budget, Seed: &seed, Temperature: &temp, TopP: &topP}, nil)
				if len(got[0].IDs) != budget {
					t.Fatalf("seeded run gave %d tokens, want %d", len(got[0].IDs), budget)
				}
			}
		})
	}
}

// With a prompt cache, the caches a request leaves (the pipelined plain
// decoder has forwarded one token more; an unused early proposal sits in
// the draft's caches until settled) serve the next request, whichever mode
// either ran in, with the tokens of a cold engine.
func TestPipelineModesShareThePromptCache(t *testing.T) {
	for _, draft := range []string{"", "dflash-tiny"} {
		t.Run("draft="+draft, func(t *testing.T) {
			manifest := writeManifest(t, draft, "[speculation]\nmax_depth = 7\n")
			cold := load(t, manifest)
			warm := loadWith(t, manifest, engine.Options{PromptCacheBytes: 1 << 30})
			r := rand.New(rand.NewPCG(19, uint64(len(draft))))
			prompt := randomIDs(r, 30)
			for turn, off := range []bool{false, true, false, true, true, false} {
				req := engine.Request{IDs: prompt, MaxTokens: 5 + turn*3}
				want, err := cold.Generate(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.NoPipeline = off
				got, err := warm.Generate(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.IDs, want.IDs) {
					t.Fatalf("turn %d (unpipelined %v): with the prompt cache %v, cold %v", turn, off, got.IDs, want.IDs)
				}
				if turn > 0 && got.CachedTokens < len(prompt)-len(want.IDs)-6 {
					t.Fatalf("turn %d: only %d of %d prompt tokens from the cache", turn, got.CachedTokens, len(prompt))
				}
				prompt = slices.Concat(prompt, got.IDs, randomIDs(r, 3))
			}
		})
	}
}

// A stop string cuts the text in either mode at the same place.
func TestPipelinedStopStrings(t *testing.T) {
	e := load(t, fixtures.ChatManifest(t, "chat", ""))
	req := engine.Request{Prompt: "The quick brown fox", MaxTokens: 24}
	full, err := e.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Text) < 8 {
		t.Skipf("the fixture's continuation %q is too short to cut", full.Text)
	}
	stop := full.Text[len(full.Text)/2 : len(full.Text)/2+3]
	cut := strings.Index(full.Text, stop)
	for _, off := range []bool{false, true} {
		r := req
		r.StopStrings, r.NoPipeline = []string{stop}, off
		got, err := e.Generate(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Text != full.Text[:cut] || got.DoneReason != "stop" || !slices.Equal(got.IDs, full.IDs[:len(got.IDs)]) {
			t.Fatalf("unpipelined %v, stop %q: text %q (%q), ids %v; want %q from %v", off, stop, got.Text, got.DoneReason, got.IDs, full.Text[:cut], full.IDs)
		}
	}
}
