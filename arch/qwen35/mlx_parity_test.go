package qwen35_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/registry"
)

// The testdata/fixtures/qwen35-tiny-mlx* checkpoints are what mlx_lm.convert
// (mlx-lm 0.32.2 on MLX 0.32.4) wrote from the qwen35-tiny fixture, with
// mlx-lm's own outputs on each as the reference (float32 compute on the
// CPU; scripts/make_mlx_fixtures.py, testdata/fixtures/README.md).

// mlxVariants lists the conversions and what each covers.
var mlxVariants = []struct {
	name, what string
}{
	{"qwen35-tiny-mlx", "unquantized MLX layout: module-path names, conv [C, Kc, 1], norms stored 1+w"},
	{"qwen35-tiny-mlx-q4", "affine 4-bit, group 64"},
	{"qwen35-tiny-mlx-q8", "affine 8-bit, group 32"},
	{"qwen35-tiny-mlx-mxfp4", "mxfp4"},
	{"qwen35-tiny-mlx-q3-g32", "affine 3-bit, group 32 (bit stream across words)"},
	{"qwen35-tiny-mlx-q6", "affine 6-bit, group 64"},
	{"qwen35-tiny-mlx-q2-g128", "affine 2-bit, group 128: only the 128-wide down_proj and o_proj are quantized"},
	{"qwen35-tiny-mlx-nvfp4", "nvfp4"},
	{"qwen35-tiny-mlx-mxfp8", "mxfp8"},
	{"qwen35-tiny-mlx-q4-bf16", "affine 4-bit with bfloat16 weights, scales and biases (as mlx-community publishes)"},
}

// mlxLogitTol bounds |specula − mlx-lm| on the prompt logits (values reach
// about 10). Both run the same MLX kernels on the same stored weights; what
// differs is the surrounding float32 maths (q/k normalisation, the scan
// form of the delta rule): measured 1.4e-5 to 8.6e-5.
const mlxLogitTol = 2e-4

// loadCheckpoint loads a checkpoint folder the way the engine does: config
// through the registry, tensors through loader.OpenCheckpoint.
func loadCheckpoint(t *mlxtest.T, dir string) *qwen35.Model {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	t.NoErr(err)
	v, _, err := registry.Default.Build("Qwen3_5ForCausalLM", registry.Config{Dir: dir, JSON: cfg, DType: mlx.Float32})
	t.NoErr(err)
	m := v.(*qwen35.Model)
	ck, err := loader.OpenCheckpoint(dir)
	t.NoErr(err)
	defer ck.Close()
	tensors, err := ck.Arrays()
	t.NoErr(err)
	t.NoErr(m.LoadWeights(tensors))
	return m
}

func TestMLXFormatParityWithMLXLM(t *testing.T) {
	for _, v := range mlxVariants {
		t.Run(v.name, func(t *testing.T) {
			dir := fixtures.Dir(t, v.name)
			mlxtest.Run(t, func(t *mlxtest.T) {
				m := loadCheckpoint(t, dir)
				defer m.Free()
				prompt := t.Int32s(mlx.AsType(fixtures.Reference(t, dir, "prompt_ids"), mlx.Int32))
				greedy := t.Int32s(mlx.AsType(fixtures.Reference(t, dir, "greedy_ids"), mlx.Int32))
				want := mlx.ExpandDims(fixtures.Reference(t, dir, "logits"), 0)

				caches := m.NewCaches()
				defer freeCaches(caches)
				logits, _ := step(m, caches, prompt)
				t.Eval(logits)
				d := maxAbs(t, logits, want)
				if d > mlxLogitTol {
					t.Fatalf("%s (%s): prompt logits differ from mlx-lm's by %.3g > %g", v.name, v.what, d, mlxLogitTol)
				}

				// Greedy decoding with the cache gives mlx-lm's tokens.
				mlx.Pin(logits)
				var got []int32
				for range greedy {
					tok := argmaxLast(t, logits)
					got = append(got, tok)
					next, _ := step(m, caches, []int32{tok})
					t.Eval(next)
					mlx.Pin(next)
					mlx.Unpin(logits)
					logits = next
					mlx.Sweep()
				}
				mlx.Unpin(logits)
				for i := range greedy {
					if got[i] != greedy[i] {
						t.Fatalf("%s: greedy token %d is %d, mlx-lm's is %d (tokens so far %v)", v.name, i, got[i], greedy[i], got[:i+1])
					}
				}
				t.Logf("%s (%s): prompt logits within %.2g of mlx-lm's; %d greedy tokens equal; layout %+v", v.name, v.what, d, len(greedy), *m.Layout())
			})
		})
	}
}
