package engine

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"testing"
)

// max_tokens = -1 fills the context; a budget past the context is kept and
// warned about once.
func TestBudget(t *testing.T) {
	cases := []struct {
		name                 string
		maxTokens, n, ctxLen int
		want                 int
		warning              string
	}{
		{"within the context", 100, 20, 4096, 100, ""},
		{"exactly the context", 76, 20, 96, 76, ""},
		{"past the context", 100, 20, 96, 100, "the prompt (20 tokens) plus max_tokens (100) exceed the target's context of 96 positions"},
		{"unknown context", 100, 20, 0, 100, ""},
		{"until done fills the context", -1, 20, 96, 76, ""},
		{"until done without a context", -1, 20, 0, math.MaxInt, ""},
		{"until done on a full context", -1, 96, 96, 0, "the prompt (96 tokens) fills the target's context of 96 positions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			e := &Engine{log: slog.New(slog.NewTextHandler(&logs, nil))}
			if got := e.budget(c.maxTokens, c.n, c.ctxLen); got != c.want {
				t.Fatalf("budget = %d, want %d", got, c.want)
			}
			switch {
			case c.warning == "" && logs.Len() > 0:
				t.Fatalf("unexpected log: %s", logs.String())
			case c.warning != "" && (!strings.Contains(logs.String(), c.warning) || strings.Count(logs.String(), "\n") != 1):
				t.Fatalf("log %q, want one line with %q", logs.String(), c.warning)
			}
		})
	}
}
