package nn

import (
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/specula-dev/specula/mlx"
)

// KernelSwitch is the on/off state of one of our CUDA kernels that stands in
// for a few MLX ops on the GPU: on by default, off when its environment
// variable is "0" (to measure or to compare against MLX's ops), and off
// for the rest of the process once a launch has failed (MLX's ops take
// over, with one warning). Whoever keeps traced graphs keys them on On: the choice
// changes the graph.
type KernelSwitch struct {
	env      string
	fallback string
	broken   atomic.Bool
}

// NewKernelSwitch returns the switch of a kernel turned off by env=0;
// fallback is the warning logged when its first launch fails, saying what
// runs instead.
func NewKernelSwitch(env, fallback string) *KernelSwitch {
	return &KernelSwitch{env: env, fallback: fallback}
}

// On reports whether the kernel may launch: on the GPU of a CUDA build,
// unless its variable is "0" or a launch has failed.
func (s *KernelSwitch) On() bool {
	if mlx.CurrentDevice() != mlx.GPU || s.broken.Load() {
		return false
	}
	return os.Getenv(s.env) != "0"
}

// Fail records a failed launch: the switch stays off from now on, and the
// first failure is logged.
func (s *KernelSwitch) Fail(err error) {
	if !s.broken.Swap(true) {
		slog.Warn(s.fallback, "err", err)
	}
}

// KernelFloat reports whether dt is a float type our kernels read and write
// (bfloat16, float16, float32).
func KernelFloat(dt mlx.DType) bool {
	return dt == mlx.BFloat16 || dt == mlx.Float16 || dt == mlx.Float32
}
