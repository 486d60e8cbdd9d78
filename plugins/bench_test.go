package plugins_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// BenchmarkRound measures the per-round cost of a drafting round with the
// fake target and the chain selector draft (fixed depth 4): in process
// (speculation.BlockDrafter) and through the helper plugin process (gRPC
// over a Unix socket with AutoMTLS: a Committed and a Propose per round).
// The difference is the plugin path's overhead per round.
func BenchmarkRound(b *testing.B) {
	target := newTarget()
	b.Run("in-process", func(b *testing.B) {
		benchRounds(b, target, func() (speculation.Drafter, func()) {
			d := &chainSelector{newChainDraft(5)}
			caches := d.NewCaches()
			return speculation.NewBlockDrafter(d, nil, caches, true), func() {}
		})
	})
	b.Run("plugin", func(b *testing.B) {
		dir, digest := helperInstall(b)
		h := plugins.NewHost(plugins.Config{Dirs: []string{dir}, Env: []string{envHelper + "=1"}, Logger: quiet})
		defer h.Close()
		reg := newRegistry()
		if err := h.LoadPlugin(context.Background(), "helper", digest, reg); err != nil {
			b.Fatal(err)
		}
		v, _, err := reg.Build("ChainSelector", registryConfig(b))
		if err != nil {
			b.Fatal(err)
		}
		dr, err := v.(speculation.DrafterFactory).NewDrafter(target, nil)
		if err != nil {
			b.Fatal(err)
		}
		benchRounds(b, target, func() (speculation.Drafter, func()) { return dr, func() {} })
	})
}

// benchRounds decodes requests of 64 tokens until b.N rounds have run and
// reports microseconds per round.
func benchRounds(b *testing.B, target *conformanceTarget, newDrafter func() (speculation.Drafter, func())) {
	rounds := 0
	var elapsed time.Duration
	for rounds < b.N {
		err := mlx.Do(context.Background(), func() error {
			dr, done := newDrafter()
			defer done()
			caches := target.NewCaches()
			core := speculation.NewCore(speculation.Config{Target: target, TargetCaches: caches, Drafter: dr, SelectorDepth: 4, Logger: quiet})
			s := core.Open(speculation.Request{Sampler: sample.New(sample.Options{}, prompt)})
			seed, pos, err := s.Prefill(context.Background(), prompt)
			if err != nil {
				return err
			}
			d := s.Decoder(seed, pos)
			start := time.Now()
			if _, err := speculation.Run(context.Background(), d, 64, func(int32) error { return nil }); err != nil {
				return err
			}
			elapsed += time.Since(start)
			d.Close()
			s.Close()
			rounds += s.Stats().Iterations
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(elapsed.Microseconds())/float64(rounds), "µs/round")
}

// quiet discards records below errors, so benchmark lines stay readable.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
