package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/plugins/sdk/plugintest"
)

// BenchmarkRound measures a drafting round on the fixture pair (Qwen3.5
// tiny target, DFlash tiny draft, float32) through the engine, greedy at the
// pinned depth 7: the DFlash draft in process, and the same draft served by
// this plugin (built once, started by a real host). It reports the decode
// time per round and the draft time per drafting round (proposal, plus for
// the plugin the deferred Committed of the round's feature rows); the
// difference between the two paths is the plugin path's per-round
// overhead.
//
//	go test ./plugins/examples/dflash -run '^$' -bench Round -benchtime 2000x -count 3
func BenchmarkRound(b *testing.B) {
	bin := plugintest.Build(b, ".")
	quiet := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	host := plugins.NewHost(plugins.Config{Dirs: []string{bin.Dir}, Logger: quiet})
	defer host.Close()
	prompt := loadReference(b).PromptIDs
	for _, c := range []struct {
		name, draft string
		opts        engine.Options
	}{
		{"in-process", "\n", engine.Options{Logger: quiet}},
		{"plugin", fmt.Sprintf("plugin = %q\nsha256 = %q\n", bin.Name, bin.SHA256), engine.Options{LoadPlugin: host.LoadPlugin, Logger: quiet}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := engine.Load(context.Background(), writeManifest(b, c.draft), c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			req := engine.Request{IDs: prompt, MaxTokens: 64, FixedDepth: 7}
			if _, err := e.Generate(context.Background(), req, nil); err != nil { // warm up
				b.Fatal(err)
			}
			b.ResetTimer()
			var decode time.Duration
			var draftMS float64
			rounds, drafting := 0, 0
			for rounds < b.N {
				r, err := e.Generate(context.Background(), req, nil)
				if err != nil {
					b.Fatal(err)
				}
				decode += r.Total - r.PrefillTime
				rounds += r.Stats.Iterations
				drafting += r.Stats.DraftRounds
				draftMS += r.Stats.DraftMS
			}
			b.ReportMetric(float64(decode.Microseconds())/float64(rounds), "µs/round")
			b.ReportMetric(draftMS*1000/float64(drafting), "draft-µs/round")
		})
	}
}
