package main

import (
	"strings"
	"testing"
)

// Sampling flags out of range are usage errors: exit 2, nothing generated,
// one line on stderr naming the flag and its valid range (the manifest's
// words, package sample's rules). Edge values that keep a meaning run.
func TestE2ESamplingFlagsAreValidated(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	m := fixtureManifest(t, "dflash-tiny")
	bad := []struct {
		flags []string
		want  string
	}{
		{[]string{"--temperature", "nan"}, "specula run: --temperature NaN is not a finite number: want >= 0 (0 is greedy)"},
		{[]string{"--temperature", "-1"}, "specula run: --temperature -1 is out of range: want >= 0 (0 is greedy)"},
		{[]string{"--temperature", "inf"}, "specula run: --temperature +Inf is not a finite number"},
		{[]string{"--min-p", "1.5"}, "specula run: --min-p 1.5 is out of range: want 0 <= min-p <= 1 (0 disables min-p)"},
		{[]string{"--min-p", "-1"}, "specula run: --min-p -1 is out of range"},
		{[]string{"--top-p", "2"}, "specula run: --top-p 2 is out of range: want 0 < top-p <= 1 (1 disables top-p)"},
		{[]string{"--top-p", "-0.5"}, "specula run: --top-p -0.5 is out of range"},
		{[]string{"--top-p", "0"}, "specula run: --top-p 0 is out of range"},
		{[]string{"--top-k", "-1"}, "specula run: --top-k -1 is out of range: want >= 0 (0 disables top-k)"},
		{[]string{"--max-tokens", "-2"}, "specula run: --max-tokens -2 is out of range: want >= 1, or -1 to generate until a stop or the end of the context"},
		{[]string{"--max-tokens", "0"}, "specula run: --max-tokens 0 generates nothing"},
		{[]string{"--stop", ""}, `specula run: --stop "" is an empty string`},
	}
	for _, c := range bad {
		t.Run(strings.Join(c.flags, " "), func(t *testing.T) {
			args := append([]string{"run", "-m", m, "--ids", joinIDs(prompt)}, c.flags...)
			stdout, stderr, code := execSpecula(t, args...)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if code != 2 || stdout != "" || len(lines) < 1 || len(lines) > 4 || !strings.HasPrefix(lines[0], c.want) {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 2, no output, first line %q", code, stdout, stderr, c.want)
			}
		})
	}
	// Edge values that leave only the greedy token, through the binary,
	// with and without the draft: the target's greedy tokens.
	for _, flags := range [][]string{
		{"--temperature", "1e-40", "--seed", "1"},
		{"--temperature", "0.8", "--top-k", "1"},
		{"--temperature", "0.8", "--min-p", "1"},
	} {
		for _, extra := range [][]string{nil, {"--no-draft"}} {
			args := append(append([]string{"run", "-m", m, "--ids", joinIDs(prompt), "--quiet"}, flags...), extra...)
			stdout, stderr, code := execSpecula(t, args...)
			if code != 0 || strings.TrimSpace(stdout) != strings.Join(strings.Split(joinIDs(greedy), ","), " ") {
				t.Fatalf("%v: exit %d, stdout %q (want the greedy %v)\n%s", args, code, stdout, greedy, stderr)
			}
		}
	}
}
