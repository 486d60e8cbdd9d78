package engine_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/tokenizer"
)

func loadWith(t *testing.T, manifest string, opts engine.Options) *engine.Engine {
	t.Helper()
	e, err := engine.Load(context.Background(), manifest, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Free(context.Background()) })
	return e
}

func randomIDs(r *rand.Rand, n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(r.IntN(500))
	}
	return ids
}

// A request served from kept caches gives the tokens the same request gives
// from fresh caches (the reference: an engine without a prompt cache), for
// each way a prompt can relate to the previous one: the same prompt again
// (resumed from the prompt-end checkpoint), the previous prompt and answer
// extended (resumed from the live caches), a prompt that diverges inside
// the previous answer (checkpoint), one that diverges inside the previous
// prompt (no usable prefix: cold), and a request after a cancelled one. The
// DFlash draft has a sliding-window layer, so its rotating cache is restored
// from snapshots too.
func TestPromptCacheGivesColdTokens(t *testing.T) {
	for _, draft := range []string{"", "dflash-tiny", "dflash2-tiny"} {
		t.Run("draft="+draft, func(t *testing.T) {
			manifest := writeManifest(t, draft, "[speculation]\nmax_depth = 7\n")
			cold := load(t, manifest)
			warm := loadWith(t, manifest, engine.Options{PromptCacheBytes: 1 << 30})
			r := rand.New(rand.NewPCG(16, uint64(len(draft))))
			const budget = 12
			check := func(name string, ids []int32, wantCached func(int) bool) *engine.Response {
				t.Helper()
				want, err := cold.Generate(context.Background(), engine.Request{IDs: ids, MaxTokens: budget}, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := warm.Generate(context.Background(), engine.Request{IDs: ids, MaxTokens: budget}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.IDs, want.IDs) {
					t.Fatalf("%s: with the prompt cache %v, cold %v", name, got.IDs, want.IDs)
				}
				if !wantCached(got.CachedTokens) {
					t.Fatalf("%s: %d prompt tokens came from the cache (prompt %d tokens)", name, got.CachedTokens, len(ids))
				}
				if want.CachedTokens != 0 {
					t.Fatalf("an engine without a prompt cache reports %d cached tokens", want.CachedTokens)
				}
				return got
			}
			p1 := randomIDs(r, 40)
			first := check("first request", p1, func(n int) bool { return n == 0 })
			check("same prompt", p1, func(n int) bool { return n == len(p1)-1 })

			// The caches hold p1 and the answer but its last token (not yet
			// forwarded when drafting, forwarded already by the pipelined
			// plain decoder).
			p2 := slices.Concat(p1, first.IDs, randomIDs(r, 9))
			check("next turn", p2, func(n int) bool {
				return n == len(p1)+len(first.IDs) || n == len(p1)+len(first.IDs)-1
			})
			// Diverges inside the previous answer: the checkpoint at the end
			// of p2's prompt is past the divergence, p1's end is not.
			p3 := slices.Concat(p1, first.IDs[:3], randomIDs(r, 5))
			check("diverges in the answer", p3, func(n int) bool { return n == len(p1)-1 })
			// Diverges inside p1: nothing before it was checkpointed.
			p4 := slices.Concat(p1[:20], randomIDs(r, 10))
			check("diverges in the prompt", p4, func(n int) bool { return n == 0 })

			// A cancelled request leaves usable caches.
			ctx, cancel := context.WithCancel(context.Background())
			emitted := 0
			_, err := warm.Generate(ctx, engine.Request{IDs: p1, MaxTokens: budget}, func(engine.Token) error {
				if emitted++; emitted == 3 {
					cancel()
				}
				return nil
			})
			if err == nil {
				t.Fatal("the cancelled request succeeded")
			}
			check("after a cancelled request", slices.Concat(p1, randomIDs(r, 4)), func(n int) bool { return n >= len(p1)-1 })
		})
	}
}

// A chat's next turn resumes where the previous prompt ended, and another
// chat with the same system message resumes after it (the checkpoint at the
// first message's end), both with the tokens of a cold run.
func TestPromptCacheChatTurns(t *testing.T) {
	manifest := fixtures.ChatManifest(t, "chat", "")
	cold := load(t, manifest)
	warm := loadWith(t, manifest, engine.Options{PromptCacheBytes: 1 << 30})
	run := func(msgs []tokenizer.Message) (*engine.Response, *engine.Response) {
		t.Helper()
		req := engine.Request{Messages: msgs, MaxTokens: 10}
		want, err := cold.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := warm.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.IDs, want.IDs) || !slices.Equal(got.PromptIDs, want.PromptIDs) {
			t.Fatalf("with the prompt cache %v, cold %v", got.IDs, want.IDs)
		}
		return got, want
	}
	system := tokenizer.Message{Role: "system", Content: "You are a terse assistant who answers in one line."}
	chat := []tokenizer.Message{system, {Role: "user", Content: "What is the capital of France?"}}
	first, firstCold := run(chat)
	if first.CachedTokens != 0 {
		t.Fatalf("first request: %d cached tokens", first.CachedTokens)
	}
	// The checkpoint at the system message's end splits the prefill there
	// (a checkpoint never lands inside a forward); without a prompt cache
	// the short prompt is one forward.
	if first.Stats.PrefillForwards != 2 || firstCold.Stats.PrefillForwards != 1 {
		t.Fatalf("prefill forwards: %d with the prompt cache, %d without; want 2 and 1", first.Stats.PrefillForwards, firstCold.Stats.PrefillForwards)
	}
	chat = append(chat, tokenizer.Message{Role: "assistant", Content: first.Text}, tokenizer.Message{Role: "user", Content: "And of Spain?"})
	second, _ := run(chat)
	if second.CachedTokens < len(first.PromptIDs)-1 {
		t.Fatalf("next turn: %d cached tokens, want at least the previous prompt's %d", second.CachedTokens, len(first.PromptIDs)-1)
	}
	// The system message ends where the template's rendering of it alone
	// ends, in tokens.
	dirTok, err := tokenizer.LoadDir(fixtures.WithTokenizer(t, "qwen35-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	head, err := dirTok.ApplyChat([]tokenizer.Message{system}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	systemEnd := len(dirTok.Tokenizer.Encode(head, tokenizer.EncodeOptions{}))
	other, _ := run([]tokenizer.Message{system, {Role: "user", Content: "Name a prime number."}})
	if other.CachedTokens != systemEnd {
		t.Fatalf("another chat with the same system message: %d cached tokens, want the system message's %d", other.CachedTokens, systemEnd)
	}
}
