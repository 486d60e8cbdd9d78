package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
)

// shortContextTarget is the fixture target with a config that says it was
// trained for n positions (the weights are linked, not copied).
func shortContextTarget(t *testing.T, n int) string {
	t.Helper()
	return fixtures.WithConfig(t, "qwen35-tiny", "max_position_embeddings", n)
}

// A budget past the target's max_position_embeddings runs with one warning
// line; --max-tokens -1 generates until the context is full (the fixture has
// no EOS), with the greedy tokens, with and without the draft.
func TestE2EContextLength(t *testing.T) {
	prompt, greedy := fixturePrompt(t) // 24 prompt ids, 32 greedy ids
	m := fixtureManifest(t, "dflash-tiny")
	withTarget(t, m, shortContextTarget(t, 40))
	warning := regexp.MustCompile(`(?m)^.*level=WARN msg="the prompt \(24 tokens\) plus max_tokens \(32\) exceed the target's context of 40 positions \(max_position_embeddings\): output past position 40 may degrade".*$`)
	for _, extra := range [][]string{nil, {"--no-draft"}} {
		stdout, stderr, code := execSpecula(t, append([]string{"run", "-m", m, "--ids", joinIDs(prompt), "--max-tokens", "32", "--quiet"}, extra...)...)
		if code != 0 || strings.TrimSpace(stdout) != strings.ReplaceAll(joinIDs(greedy), ",", " ") {
			t.Fatalf("%v: exit %d, stdout %q\n%s", extra, code, stdout, stderr)
		}
		if len(warning.FindAllString(stderr, -1)) != 1 || strings.Count(stderr, "\n") != 1 {
			t.Fatalf("%v: stderr %q, want the one context warning", extra, stderr)
		}
		stdout, stderr, code = execSpecula(t, append([]string{"run", "-m", m, "--ids", joinIDs(prompt), "--max-tokens", "-1", "--json", "--quiet"}, extra...)...)
		var out struct {
			IDs        []int32 `json:"ids"`
			DoneReason string  `json:"done_reason"`
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil {
			t.Fatalf("--max-tokens -1 %v: exit %d, stdout %q\n%s", extra, code, stdout, stderr)
		}
		if !slices.Equal(out.IDs, greedy[:40-24]) || out.DoneReason != "length" || stderr != "" {
			t.Fatalf("--max-tokens -1 %v: ids %v (%s), stderr %q; want the first 16 greedy ids %v", extra, out.IDs, out.DoneReason, stderr, greedy[:16])
		}
	}
}

// withTarget rewrites manifest m to use the target checkpoint in dir.
func withTarget(t *testing.T, m, dir string) {
	t.Helper()
	text, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	text = []byte(strings.Replace(string(text), `"`+fixtures.Dir(t, "qwen35-tiny")+`"`, `"`+dir+`"`, 1))
	if err := os.WriteFile(m, text, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A target with NaN weights fails at the first step with one line naming
// the cause: no token, exit 1 (it used to print token 0 forever with
// acceptance 1.00).
func TestE2ENaNWeightsFail(t *testing.T) {
	prompt, _ := fixturePrompt(t)
	m := fixtureManifest(t, "dflash-tiny")
	withTarget(t, m, fixtures.NaNCopy(t, "qwen35-tiny"))
	for _, extra := range [][]string{nil, {"--no-draft"}} {
		stdout, stderr, code := execSpecula(t, append([]string{"run", "-m", m, "--ids", joinIDs(prompt), "--quiet"}, extra...)...)
		if code != 1 || strings.TrimSpace(stdout) != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.HasPrefix(stderr, "specula run: the target's logits are not finite (NaN or infinite) at the first step") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", extra, code, stdout, stderr)
		}
	}
}
