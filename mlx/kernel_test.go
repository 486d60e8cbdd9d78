package mlx_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// scaleKernel returns a kernel out = float(x) · factor named
// specula_test_scale; every factor gives another source under that one
// name, as an edited kernel of a later specula version would.
func scaleKernel(factor string) *mlx.CUDAKernel {
	return &mlx.CUDAKernel{
		Name:    "specula_test_scale",
		Inputs:  []string{"x"},
		Outputs: []string{"out"},
		Source: `
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) out[i] = static_cast<float>(x[i]) * ` + factor + `;
`,
	}
}

func scaleLaunch(n int) mlx.KernelLaunch {
	return mlx.KernelLaunch{
		OutputShapes: [][]int{{n}},
		OutputDTypes: []mlx.DType{mlx.Float32},
		Grid:         [3]int{n, 1, 1},
		Block:        [3]int{32, 1, 1},
		Templates:    []mlx.KernelTemplate{{Name: "N", Value: n}},
	}
}

// MLX caches a compiled kernel by its name and template constants only, in
// the process and in $TMPDIR/mlx/<version>/ptx across runs. The name a
// kernel compiles under must therefore change with everything else in the
// compiled text — header, source, input dtypes — and stay a C identifier
// that starts with the kernel's own name (NVRTC logs and profiles show it).
func TestCompiledNameFollowsCompiledText(t *testing.T) {
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	base := scaleKernel("2.0f")
	bf16 := []mlx.DType{mlx.BFloat16}
	withHeader := scaleKernel("2.0f")
	withHeader.Header = "#define UNUSED 1\n"
	// The header and source are hashed apart: moving text from one to the
	// other changes the compiled text, so it must change the name.
	split := scaleKernel("2.0f")
	split.Header, split.Source = split.Source[:10], split.Source[10:]
	names := map[string]string{
		"base":                   base.CompiledName(bf16),
		"another source":         scaleKernel("3.0f").CompiledName(bf16),
		"a header":               withHeader.CompiledName(bf16),
		"source split at 10":     split.CompiledName(bf16),
		"float16 input":          base.CompiledName([]mlx.DType{mlx.Float16}),
		"float32 input":          base.CompiledName([]mlx.DType{mlx.Float32}),
		"two inputs, bf16 first": base.CompiledName([]mlx.DType{mlx.BFloat16, mlx.Float32}),
		"two inputs, f32 first":  base.CompiledName([]mlx.DType{mlx.Float32, mlx.BFloat16}),
	}
	seen := map[string]string{}
	for what, name := range names {
		if !ident.MatchString(name) || !strings.HasPrefix(name, base.Name+"_") {
			t.Errorf("%s: compiled name %q is not %s_ then identifier characters", what, name, base.Name)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%s and %s compile under one name %q: MLX would run one's build for the other", what, other, name)
		}
		seen[name] = what
	}
	if again := scaleKernel("2.0f").CompiledName(bf16); again != names["base"] {
		t.Errorf("the same kernel and dtypes compile under %q, then %q: the name must be stable across runs for MLX's disk cache to serve it", names["base"], again)
	}
}

// The test kernel compiles for each input dtype the GPU test launches it
// with (NVRTC; no GPU needed).
func TestScaleKernelCompiles(t *testing.T) {
	for _, dt := range []mlx.DType{mlx.Float16, mlx.BFloat16} {
		mlxtest.CompileCUDA(t, scaleKernel("2.0f"), []mlx.DType{dt}, scaleLaunch(40))
	}
}

// Two kernels of one name with different sources, and one kernel launched
// with float16 then bfloat16 inputs, each run their own code in one
// process. (With MLX's cache keyed by name and template constants only, the
// second of each pair ran the first's build: a factor of 2 for 3, and
// bfloat16 bits read as float16.)
func TestCUDAKernelsOfOneNameRunTheirOwnCode(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("custom CUDA kernels need the GPU of a CUDA build")
		}
		const n = 40
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(i) - 13.5 // exact in float16 and bfloat16
		}
		x := mlx.FromFloat32s(vals, n)
		for _, c := range []struct {
			factor string
			want   float32
			dtype  mlx.DType
		}{
			{"2.0f", 2, mlx.Float16},
			{"3.0f", 3, mlx.Float16},
			{"2.0f", 2, mlx.BFloat16},
			{"3.0f", 3, mlx.BFloat16},
		} {
			outs, err := scaleKernel(c.factor).Run([]*mlx.Array{mlx.AsType(x, c.dtype)}, scaleLaunch(n))
			if err != nil {
				t.Fatalf("×%s on %v: %v", c.factor, c.dtype, err)
			}
			got := t.Float32s(outs[0])
			for i, v := range vals {
				if got[i] != v*c.want {
					t.Fatalf("×%s on %v: out[%d] = %g, want %g (another kernel's build ran)", c.factor, c.dtype, i, got[i], v*c.want)
				}
			}
		}
	})
}
