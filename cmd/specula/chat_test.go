package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/server"
	"github.com/specula-dev/specula/tokenizer"
)

// The interactive chat sends the whole conversation each turn (a message of
// several lines between """ marks included), /clear forgets it, /bye ends
// it; each answer equals a cold engine's answer to the same messages, and
// the second turn resumes from the prompt cache.
func TestChatLoop(t *testing.T) {
	ctx := context.Background()
	manifest := fixtures.ChatManifest(t, "fixture-chat", "")
	eng, err := engine.Load(ctx, manifest, engine.Options{PromptCacheBytes: server.DefaultPromptCacheBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Free(ctx)
	cold, err := engine.Load(ctx, manifest, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Free(ctx)
	max := 8
	var stdout, stderr bytes.Buffer
	c := &chatSession{eng: eng, base: engine.Request{MaxTokens: max}, system: "Be brief.", stdout: &stdout, stderr: &stderr, stats: true}
	input := "hello\n\"\"\"\ntwo\nlines\n\"\"\"\n/clear\nagain\n/bye\nnot read\n"
	if err := c.loop(strings.NewReader(input), func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }); err != nil {
		t.Fatal(err)
	}
	answer := func(msgs ...tokenizer.Message) string {
		t.Helper()
		r, err := cold.Generate(ctx, engine.Request{MaxTokens: max, Messages: append([]tokenizer.Message{{Role: "system", Content: "Be brief."}}, msgs...)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r.Text
	}
	a1 := answer(tokenizer.Message{Role: "user", Content: "hello"})
	a2 := answer(tokenizer.Message{Role: "user", Content: "hello"}, tokenizer.Message{Role: "assistant", Content: a1}, tokenizer.Message{Role: "user", Content: "two\nlines"})
	a3 := answer(tokenizer.Message{Role: "user", Content: "again"})
	want := ">>> " + a1 + "\n>>> ... ... ... " + a2 + "\n>>> >>> " + a3 + "\n>>> "
	if stdout.String() != want {
		t.Fatalf("chat output\n%q\nwant\n%q", stdout.String(), want)
	}
	cached := regexp.MustCompile(`(\d+) prompt tokens from the cache`).FindAllStringSubmatch(stderr.String(), -1)
	if len(cached) != 3 || cached[0][1] != "0" || cached[1][1] == "0" {
		t.Fatalf("stats lines %q: want the second turn served from the prompt cache", stderr.String())
	}
	if !strings.Contains(stderr.String(), "Cleared the conversation.") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

// A checkpoint without a chat template cannot chat: the chat says so
// before its banner and first prompt, instead of taking a message and then
// ending on it. (go-tiny has a tokenizer and no template.)
func TestChatWithoutTemplateFailsFirst(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.Load(ctx, filepath.Join("..", "..", "manifests", "go-tiny.toml"), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Free(ctx)
	var stdout, stderr bytes.Buffer
	c := &chatSession{eng: eng, base: engine.Request{MaxTokens: 4}, stdout: &stdout, stderr: &stderr}
	err = c.loop(strings.NewReader("hello\n"), func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) })
	if !errors.Is(err, tokenizer.ErrNoChatTemplate) || !strings.Contains(err.Error(), "give a prompt") || stdout.Len() != 0 || stderr.Len() != 0 {
		t.Fatalf("error %v, stdout %q, stderr %q; want ErrNoChatTemplate with its hint, before any output", err, stdout.String(), stderr.String())
	}
}
