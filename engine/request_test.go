package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/specula-dev/specula/engine"
)

// Validate refuses every setting the manifest refuses, naming the setting as
// manifests do, and Generate refuses an invalid request before decoding.
func TestRequestValidate(t *testing.T) {
	f := func(x float32) *float32 { return &x }
	i := func(n int) *int { return &n }
	nan := float32(0)
	nan = nan / nan
	cases := []struct {
		name  string
		req   engine.Request
		field string // "" valid
	}{
		{"zero request", engine.Request{}, ""},
		{"edge values", engine.Request{MaxTokens: -1, Temperature: f(1e-45), TopK: i(1), TopP: f(1), MinP: f(1), RepeatPenalty: f(1e-3), RepeatLastN: i(-1), StopIDs: []int32{0}, StopStrings: []string{"x"}}, ""},
		{"NaN temperature", engine.Request{Temperature: &nan}, "temperature"},
		{"negative temperature", engine.Request{Temperature: f(-1)}, "temperature"},
		{"negative top-k", engine.Request{TopK: i(-1)}, "top_k"},
		{"top-p 0", engine.Request{TopP: f(0)}, "top_p"},
		{"min-p above 1", engine.Request{MinP: f(1.5)}, "min_p"},
		{"repeat penalty 0", engine.Request{RepeatPenalty: f(0)}, "repeat_penalty"},
		{"repeat_last_n -2", engine.Request{RepeatLastN: i(-2)}, "repeat_last_n"},
		{"max_tokens -2", engine.Request{MaxTokens: -2}, "max_tokens"},
		{"empty stop string", engine.Request{StopStrings: []string{"a", ""}}, "stop"},
		{"negative stop id", engine.Request{StopIDs: []int32{-1}}, "stop"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.req.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *engine.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("Validate = %v, want a FieldError for %s", err, c.field)
			}
		})
	}
}

func TestGenerateRefusesInvalidRequests(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	e := load(t, writeManifest(t, "", ""))
	minP := float32(1.5)
	resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MinP: &minP}, func(engine.Token) error {
		// Not t.Fatal: this runs on the MLX worker.
		return errors.New("a token was emitted")
	})
	var fe *engine.FieldError
	if !errors.As(err, &fe) || fe.Field != "min_p" || resp != nil {
		t.Fatalf("min-p 1.5: %v, %v", resp, err)
	}
	_, err = e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, StopIDs: []int32{512}}, nil)
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "stop = 512 is not a token id: want 0 <= id < 512 (the vocabulary size)") {
		t.Fatalf("stop id 512 of a 512-token vocabulary: %v", err)
	}
}
