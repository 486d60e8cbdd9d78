package main

import (
	"context"
	"fmt"
	"time"

	"github.com/specula-dev/specula/mlx"
)

func init() {
	register(&command{name: "demo", summary: "run the embedded demo (random weights, no downloads)", run: runDemo})
}

// runDemo is, until the speculative demo pair lands, a smoke forward through
// MLX: it says so, and proves the binding works on this machine.
func runDemo(e *env, args []string) int {
	fs := newFlags(e, "demo", "")
	if _, code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	fmt.Fprintln(e.stdout, "specula demo: smoke forward only (the speculative demo pair is not built yet)")
	var lines []string
	err := mlx.Do(context.Background(), func() error {
		lines = append(lines, fmt.Sprintf("MLX %s on the %s", mlx.Version(), mlx.CurrentDevice()))
		const n = 512
		key := mlx.RandomKey(1)
		x := mlx.RandomNormal(key, mlx.Float32, 0, 1, n, n)
		w := mlx.RandomNormal(mlx.RandomKey(2), mlx.Float32, 0, 1/float32(n), n, n)
		if err := mlx.Eval(x, w); err != nil {
			return err
		}
		start := time.Now()
		h := mlx.Softmax(mlx.Linear(x, w), true, -1)
		s, err := mlx.Sum(h, false).Item()
		if err != nil {
			return err
		}
		el := time.Since(start)
		lines = append(lines, fmt.Sprintf("softmax(x·wᵀ) over a %dx%d float32 matmul: row sums total %.3f (want %d) in %v", n, n, s, n, el.Round(time.Microsecond)))
		return nil
	})
	if err != nil {
		return fail(e, "demo", err)
	}
	for _, l := range lines {
		fmt.Fprintln(e.stdout, l)
	}
	return exitOK
}
