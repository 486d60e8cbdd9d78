package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	_ "github.com/specula-dev/specula/arch/all"
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/tokenizer"
)

// Through HTTP, on the real engine: completions and chats give the tokens
// the engine gives for the same request on its own; a chat's next turn is
// served from the prompt cache (cached_tokens > 0) with the tokens of a cold
// run; and loading, serving and unloading leaves nothing behind: the second
// round of it ends with MLX's active memory where the first ended. (The
// first forwards make process-wide constants that stay: compiled
// functions' scalars.)
func TestServedTokensEqualEngine(t *testing.T) {
	ctx := context.Background()
	manifest := fixtures.ChatManifest(t, "fixture-chat", "[sampling]\ntemperature = 0.0\nmax_tokens = 16\n")
	ref, err := engine.Load(ctx, manifest, engine.Options{}) // cold: no prompt cache
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Free(ctx)
	srv, err := New(Config{Manifests: []string{manifest}, KeepAlive: -1, Load: EngineLoader(DefaultPromptCacheBytes, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer srv.Close()
	defer ts.Close()
	var mem []int64
	for range 2 {
		serveAndCompare(t, ts.URL, ref)
		final := decode[ollamaFinal](t, readAll(t, post(t, ts.URL+"/api/generate", `{"model":"fixture-chat","keep_alive":0}`)))
		if final.DoneReason != "unload" {
			t.Fatalf("unload answer %+v", final)
		}
		n, err := mlx.Call(ctx, func() (int64, error) { return mlx.ActiveMemory(), nil })
		if err != nil {
			t.Fatal(err)
		}
		mem = append(mem, n)
	}
	if mem[1] != mem[0] {
		t.Fatalf("MLX active memory after loading, serving and unloading: %d bytes the first time, %d the second", mem[0], mem[1])
	}
}

func serveAndCompare(t *testing.T, url string, ref *engine.Engine) {
	t.Helper()
	ctx := context.Background()
	ts := struct{ URL string }{url}
	// A completion of token ids.
	ids := []int32{17, 300, 42, 5, 99, 250, 7, 460}
	want, err := ref.Generate(ctx, engine.Request{IDs: ids, MaxTokens: 12}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, post(t, ts.URL+"/v1/completions", `{"model":"fixture-chat","prompt":[17,300,42,5,99,250,7,460],"max_tokens":12,"temperature":0}`))
	got := decode[struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage openAIUsage `json:"usage"`
	}](t, body)
	if got.Choices[0].Text != want.Text || got.Usage.CompletionTokens != len(want.IDs) {
		t.Fatalf("served %q (%d tokens), engine %q (%d)", got.Choices[0].Text, got.Usage.CompletionTokens, want.Text, len(want.IDs))
	}

	// A chat, then its next turn.
	msgs := []tokenizer.Message{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: "Why is the sky blue?"}}
	turn := func(msgs []tokenizer.Message) (string, int) {
		t.Helper()
		want, err := ref.Generate(ctx, engine.Request{Messages: msgs}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString(`{"model":"fixture-chat","stream":false,"messages":[`)
		for i, m := range msgs {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"role":%q,"content":%q}`, m.Role, m.Content)
		}
		b.WriteString("]}")
		final := decode[ollamaFinal](t, readAll(t, post(t, ts.URL+"/api/chat", b.String())))
		if final.Message == nil || final.Message.Content != want.Text || final.EvalCount != len(want.IDs) {
			t.Fatalf("served %+v, engine %q", final, want.Text)
		}
		if final.Speculation == nil {
			t.Fatal("no speculation statistics")
		}
		return final.Message.Content, final.Speculation.CachedTokens
	}
	answer, cached := turn(msgs)
	if cached != 0 {
		t.Fatalf("first turn: %d cached tokens", cached)
	}
	msgs = append(msgs, tokenizer.Message{Role: "assistant", Content: answer}, tokenizer.Message{Role: "user", Content: "And at sunset?"})
	if _, cached = turn(msgs); cached == 0 {
		t.Fatal("the next turn was not served from the prompt cache")
	}

}
