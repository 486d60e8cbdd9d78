package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
)

// The demo explains a slowdown: for each drafting mode whose speedup's
// interval lies below 1 (and only those), the round's cost in plain steps
// and the tokens it committed — here the H100 figures of 2026-12-06
// (2.77 ms rounds, 0.71 ms steps: 3.9 steps; hand-computed).
func TestDemoExplainsASlowdown(t *testing.T) {
	results := []modeResult{
		{Mode: "plain", RoundMS: spread{Median: 0.71}},
		{Mode: "DFlash", RoundMS: spread{Median: 0.75}, MeanAcceptanceLength: 1.0,
			SpeedupSpread: &speedup{Median: 0.99, CILow: 0.95, CIHigh: 1.02}},
		{Mode: "DFlash2", RoundMS: spread{Median: 2.77}, MeanAcceptanceLength: 2.54,
			SpeedupSpread: &speedup{Median: 0.69, CILow: 0.66, CIHigh: 0.72}},
	}
	want := []string{"DFlash2 ran slower than plain decoding here: a round (drafting and verifying) took 3.9 plain steps (2.77 against 0.71 ms) and committed 2.54 tokens."}
	if got := slowerThanPlain(results); !slices.Equal(got, want) {
		t.Errorf("notes %q, want %q", got, want)
	}
	var out bytes.Buffer
	printGoTinyDemo(&env{ctx: context.Background(), stdout: &out, stderr: &out}, "f", "x", 1, 3, true, results)
	if !strings.Contains(out.String(), want[0]) || !strings.Contains(out.String(), "Be warned") {
		t.Errorf("the demo's output lacks the explanation:\n%s", out.String())
	}
	// Faster or within the noise: nothing to explain.
	results[2].SpeedupSpread = &speedup{Median: 1.4, CILow: 1.3, CIHigh: 1.5}
	out.Reset()
	printGoTinyDemo(&env{ctx: context.Background(), stdout: &out, stderr: &out}, "f", "x", 1, 3, true, results)
	if notes := slowerThanPlain(results); len(notes) != 0 || strings.Contains(out.String(), "slower than plain") {
		t.Errorf("a faster mode is explained as a slowdown: %q\n%s", notes, out.String())
	}
}
