package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The speedup is the median of paired ratios, with a bootstrap interval of
// that median; the verdict follows from whether the interval contains 1.
func TestSpeedupOverPairedRuns(t *testing.T) {
	cases := []struct {
		name        string
		plain, spec []float64
		median      float64
		within      bool
		verdict     string
	}{
		{"twice as fast every time", []float64{10, 20, 5, 8}, []float64{20, 40, 10, 16}, 2, false, ": faster"},
		{"noise around 1", []float64{10, 10, 10, 10, 10}, []float64{9, 11, 10, 10.5, 9.5}, 1, true, ": within the noise"},
		{"slower every time", []float64{10, 10, 10}, []float64{5, 6, 7}, 0.6, false, ": slower"},
		// A drifting machine: run k of both modes shares the drift, so the
		// paired ratio is exact although the speeds spread 10x.
		{"drift cancels in pairs", []float64{100, 50, 20, 10}, []float64{150, 75, 30, 15}, 1.5, false, ": faster"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r modeResult
			r.speedupOver(&benchMode{tps: c.plain}, &benchMode{tps: c.spec})
			sp := r.SpeedupSpread
			if sp == nil || sp.Pairs != len(c.plain) || math.Abs(sp.Median-c.median) > 1e-12 || r.Speedup != sp.Median {
				t.Fatalf("speedup %+v, want median %v over %d pairs", sp, c.median, len(c.plain))
			}
			if sp.WithinNoise != c.within || sp.CILow > sp.Median || sp.CIHigh < sp.Median || sp.CILow < sp.Min || sp.CIHigh > sp.Max {
				t.Fatalf("speedup %+v: want within noise %v and min <= CI low <= median <= CI high <= max", sp, c.within)
			}
			if v := speedupVerdict(sp); !strings.Contains(v, c.verdict) {
				t.Fatalf("verdict %q, want it to say %q", v, c.verdict)
			}
		})
	}
}

// bench --json reports the paired speedup of the speculative mode, over
// every prompt and repeat.
func TestE2EBenchReportsTheSpeedupSpread(t *testing.T) {
	m := fixtureManifest(t, "dflash-tiny")
	stdout, stderr, code := execSpecula(t, "bench", "-m", m, "--repeats", "2", "--warmup", "0", "--max-tokens", "6", "--json", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out struct {
		Prompts     int                `json:"prompts"`
		Plain       struct{ Runs int } `json:"plain"`
		Speculative struct {
			Runs    int     `json:"runs"`
			Speedup float64 `json:"speedup_over_plain"`
			Spread  struct {
				Pairs       int     `json:"pairs"`
				Median      float64 `json:"median"`
				Low         float64 `json:"ci95_low"`
				High        float64 `json:"ci95_high"`
				WithinNoise *bool   `json:"within_noise"`
			} `json:"speedup"`
		} `json:"speculative"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	sp := out.Speculative.Spread
	if out.Prompts != 5 || out.Plain.Runs != 10 || out.Speculative.Runs != 10 || sp.Pairs != 10 ||
		sp.Median != out.Speculative.Speedup || sp.Low > sp.Median || sp.High < sp.Median || sp.WithinNoise == nil ||
		*sp.WithinNoise != (sp.Low <= 1 && sp.High >= 1) {
		t.Fatalf("bench result %+v", out)
	}
}
