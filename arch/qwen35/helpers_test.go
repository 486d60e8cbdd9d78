package qwen35_test

import (
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The qwen35-tiny fixture (testdata/fixtures/qwen35-tiny: a random 4-layer
// Qwen3.5, 3 delta-net layers then attention, with transformers' outputs)
// and the helpers of the shared parity checks, under short names.
var (
	maxAbs     = qwen35test.MaxAbs
	relErr     = qwen35test.RelErr
	argmaxLast = qwen35test.ArgmaxLast
	argmaxRows = qwen35test.ArgmaxRows
	freeCaches = qwen35test.FreeCaches
	rows       = qwen35test.Rows
	batch      = qwen35test.Batch
)

// Tolerances of the shared checks (see qwen35test).
const (
	logitTol     = qwen35test.LogitTol
	hiddenTol    = qwen35test.HiddenTol
	pathLogitTol = qwen35test.PathLogitTol
)

func loadTiny(t testing.TB) *qwen35test.Fixture {
	t.Helper()
	return qwen35test.Load(t, "qwen35-tiny")
}

// tiny builds the fixture's model in float32 through the registry, as a
// program would, with tensors (the checkpoint's when nil).
func tiny(t *mlxtest.T, f *qwen35test.Fixture, tensors map[string]*mlx.Array) *qwen35.Model {
	t.Helper()
	return f.Target(t, tensors).(*qwen35.Model)
}

// step runs one forward of ids at the caches' offset and returns the
// logits [1, L, V] and aux.
func step(m *qwen35.Model, caches []cache.Cache, ids []int32) (logits, aux *mlx.Array) {
	return qwen35test.Step(m, caches, ids)
}
