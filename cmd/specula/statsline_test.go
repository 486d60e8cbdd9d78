package main

import (
	"strings"
	"testing"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/speculation"
)

// The summary after `specula run` names a draft plugin's fault (the stats
// reason docs/plugins.md promises), whether the plugin drafted before it
// failed or never did; without one it does not mention plugins.
func TestStatsLineNamesPluginFault(t *testing.T) {
	cases := []struct {
		name  string
		stats speculation.Stats
		want  string
	}{
		{"crashed mid-request", speculation.Stats{DraftRounds: 3, Drafted: 6, Accepted: 2, Iterations: 20,
			Fallback: map[string]int{speculation.FallbackPluginCrash: 14}}, "draft plugin fault: plugin-crash"},
		{"never valid", speculation.Stats{DepthPolicy: "pinned 3", Iterations: 24,
			Fallback: map[string]int{speculation.FallbackPluginInvalid: 24}}, "draft plugin fault: plugin-invalid"},
		{"timed out", speculation.Stats{DepthPolicy: "adaptive", Iterations: 24,
			Fallback: map[string]int{speculation.FallbackPluginTimeout: 20, speculation.FallbackUnprimed: 4}}, "draft plugin fault: plugin-timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			line := statsLine(&engine.Response{IDs: make([]int32, 24), DoneReason: "length", Stats: c.stats})
			if !strings.Contains(line, c.want) {
				t.Fatalf("%q does not say %q", line, c.want)
			}
		})
	}
	clean := statsLine(&engine.Response{IDs: make([]int32, 24), DoneReason: "length",
		Stats: speculation.Stats{DepthPolicy: "adaptive", Fallback: map[string]int{speculation.FallbackDepthZero: 3}}})
	if strings.Contains(clean, "plugin") {
		t.Fatalf("%q mentions a plugin fault that did not happen", clean)
	}
}
