package mlx_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// fusionExpected says whether MLX compiles here: not under SPECULA_COMPILE=0,
// and on the CPU only with g++, which MLX runs to build fused CPU kernels
// (without it MLX runs compiled functions op by op).
func fusionExpected() bool {
	if !mlx.CompileEnabled() {
		return false
	}
	if onCPU() {
		if _, err := exec.LookPath("g++"); err != nil {
			return false
		}
	}
	return true
}

// onCPU reports whether the MLX worker computes on the CPU.
func onCPU() bool {
	dev, err := mlx.Call(context.Background(), func() (mlx.Device, error) { return mlx.CurrentDevice(), nil })
	return err == nil && dev == mlx.CPU
}

// gateFn is the element-wise chain of a delta-net gate,
// exp(c · log(1 + e^(a+b))), counted per trace.
func gateFn(traces *int) func([]*mlx.Array) []*mlx.Array {
	return func(in []*mlx.Array) []*mlx.Array {
		*traces++
		a, b, c := in[0], in[1], in[2]
		return []*mlx.Array{
			mlx.Exp(mlx.Multiply(c, mlx.Softplus(mlx.Add(a, b)))),
			mlx.Sigmoid(a),
		}
	}
}

func gateRef(a, b, c float64) (float64, float64) {
	return math.Exp(c * math.Log1p(math.Exp(a+b))), 1 / (1 + math.Exp(-a))
}

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestCompiledMatchesReferenceAndTracesOncePerSignature(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		traces := 0
		f := mlx.Compile("gate", 2, gateFn(&traces))
		r := rand.New(rand.NewPCG(1, 2))
		for _, rows := range []int{1, 1, 1, 4, 4, 1} {
			a, b := randFloats(r, rows*8), randFloats(r, 8)
			c := make([]float32, 8)
			for i := range c {
				c[i] = -float32(math.Exp(r.NormFloat64()))
			}
			out := f.Call(mlx.FromFloat32s(a, 1, rows, 8), mlx.FromFloat32s(b, 8), mlx.FromFloat32s(c, 8))
			t.Shape(out[0], 1, rows, 8)
			t.Shape(out[1], 1, rows, 8)
			alpha, beta := t.Float32s(out[0]), t.Float32s(out[1])
			for i := range alpha {
				wa, wb := gateRef(float64(a[i]), float64(b[i%8]), float64(c[i%8]))
				if math.Abs(float64(alpha[i])-wa) > 1e-5*math.Max(1, math.Abs(wa)) || math.Abs(float64(beta[i])-wb) > 1e-6 {
					t.Fatalf("rows %d, element %d: got (%g, %g), want (%g, %g)", rows, i, alpha[i], beta[i], wa, wb)
				}
			}
		}
		// Two signatures ([1,1,8] and [1,4,8]): the Go function ran twice,
		// unless compilation is off, when it runs on every call.
		want := 2
		if !fusionExpected() {
			want = 6
		}
		if traces != want {
			t.Fatalf("the Go function ran %d times, want %d", traces, want)
		}
	})
}

func TestCompiledFreesItsTraceArrays(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		traces := 0
		f := mlx.Compile("gate", 2, gateFn(&traces))
		in := []*mlx.Array{mlx.Ones(mlx.Float32, 1, 2, 8), mlx.Ones(mlx.Float32, 8), mlx.Ones(mlx.Float32, 8)}
		mlx.Pin(in...)
		defer mlx.Unpin(in...)
		mlx.Sweep()
		base := mlx.LiveArrays()
		for range 50 {
			out := f.Call(in...)
			t.Eval(out...)
			mlx.Sweep()
		}
		if got := mlx.LiveArrays(); got != base {
			t.Fatalf("live arrays %d after 50 calls, want %d", got, base)
		}
	})
}

func TestCompiledErrorsAreRecordedNotFatal(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		traces := 0
		f := mlx.Compile("gate", 2, gateFn(&traces))
		// [3] and [8] do not broadcast: the trace fails inside the Go function.
		out := f.Call(mlx.Ones(mlx.Float32, 3), mlx.Ones(mlx.Float32, 8), mlx.Ones(mlx.Float32, 8))
		if len(out) != 2 || out[0].Valid() || out[1].Valid() {
			t.Fatalf("a failed trace returned valid outputs")
		}
		err := mlx.Eval(mlx.Exp(out[0]))
		if err == nil || !strings.Contains(err.Error(), "compiled function gate") {
			t.Fatalf("Eval error = %v, want one naming the compiled function", err)
		}
		// An empty input gives empty outputs without tracing.
		before := traces
		out = f.Call(out[0], mlx.Ones(mlx.Float32, 8), mlx.Ones(mlx.Float32, 8))
		if out[0].Valid() || traces != before {
			t.Fatalf("an empty input was traced")
		}
		// The function still works afterwards.
		out = f.Call(mlx.Zeros(mlx.Float32, 8), mlx.Zeros(mlx.Float32, 8), mlx.Zeros(mlx.Float32, 8))
		if got := t.Float32s(out[1]); got[0] != 0.5 {
			t.Fatalf("sigmoid(0) = %g after an error, want 0.5", got[0])
		}
	})
}

func TestCompiledPanicReachesTheCaller(t *testing.T) {
	f := mlx.Compile("boom", 1, func(in []*mlx.Array) []*mlx.Array {
		if in[0].Dim(0) == 2 {
			panic("boom at two rows")
		}
		return []*mlx.Array{mlx.Negative(in[0])}
	})
	var wp *mlx.WorkerPanic
	func() {
		defer func() {
			r := recover()
			var ok bool
			if wp, ok = r.(*mlx.WorkerPanic); !ok {
				t.Fatalf("recovered %v, want a *mlx.WorkerPanic", r)
			}
		}()
		_ = mlx.Do(context.Background(), func() error {
			f.Call(mlx.Ones(mlx.Float32, 2))
			return nil
		})
	}()
	if !strings.Contains(wp.Error(), "boom at two rows") {
		t.Fatalf("panic = %v, want the traced function's", wp)
	}
	// The worker and the compiled function survive.
	err := mlx.Do(context.Background(), func() error {
		v, err := f.Call(mlx.Ones(mlx.Float32, 3))[0].Float32s()
		if err == nil && v[2] != -1 {
			err = errors.New("wrong value after a panic")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCompiledFusesTheChainIntoOneNode(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		a, b, c := mlx.Ones(mlx.Float32, 1, 2, 8), mlx.Ones(mlx.Float32, 8), mlx.Ones(mlx.Float32, 8)
		t.Eval(a, b, c)
		traces := 0
		direct := gateFn(&traces)([]*mlx.Array{a, b, c})[0]
		ops, err := mlx.GraphOps(direct)
		t.NoErr(err)
		// exp(c · softplus(a + b)) op by op: softplus is logaddexp(x, 0).
		for _, name := range []string{"Add", "LogAddExp", "Multiply", "Exp"} {
			if ops[name] != 1 {
				t.Fatalf("uncompiled chain: %d %s nodes, want 1 (%v)", ops[name], name, ops)
			}
		}
		if !fusionExpected() {
			t.Skip("compilation is off here (SPECULA_COMPILE=0, or a CPU without g++)")
		}
		fused := mlx.Compile("gate", 2, gateFn(&traces)).Call(a, b, c)[0]
		ops, err = mlx.GraphOps(fused)
		t.NoErr(err)
		compiled := 0
		for name, n := range ops {
			switch {
			case strings.HasPrefix(name, "Compiled"):
				compiled += n
			case name == "Exp" || name == "LogAddExp" || name == "Add" || name == "Multiply":
				t.Fatalf("compiled chain left a separate %s node (%v)", name, ops)
			}
		}
		if compiled != 1 {
			t.Fatalf("compiled chain: %d fused nodes, want 1 (%v)", compiled, ops)
		}
	})
}

func TestConstantIsSharedAndHoldsTheValue(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		w := mlx.Constant(0.125, mlx.BFloat16, 5)
		if again := mlx.Constant(0.125, mlx.BFloat16, 5); again != w {
			t.Fatalf("Constant made a second array for the same value, dtype and size")
		}
		t.Shape(w, 5)
		if w.DType() != mlx.BFloat16 {
			t.Fatalf("dtype %s, want bfloat16", w.DType())
		}
		for _, v := range t.Float32s(w) {
			if v != 0.125 {
				t.Fatalf("element %g, want 0.125", v)
			}
		}
		mlx.Free(w) // shared constants ignore Free
		mlx.Sweep()
		if got := t.Float32s(mlx.Constant(0.125, mlx.BFloat16, 5)); got[4] != 0.125 {
			t.Fatalf("constant lost after Free and Sweep: %v", got)
		}
	})
}

func TestFreedCompiledFunctionCannotBeCalled(t *testing.T) {
	traces := 0
	f := mlx.Compile("gate", 2, gateFn(&traces))
	err := mlx.Do(context.Background(), func() error {
		one := mlx.Ones(mlx.Float32, 4)
		if err := mlx.Eval(f.Call(one, one, one)...); err != nil {
			return err
		}
		f.Free()
		f.Free() // idempotent
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		r := recover()
		if wp, ok := r.(*mlx.WorkerPanic); !ok || !strings.Contains(wp.Error(), "freed compiled function gate") {
			t.Fatalf("calling a freed compiled function: recovered %v, want a panic naming it", r)
		}
	}()
	_ = mlx.Do(context.Background(), func() error {
		one := mlx.Ones(mlx.Float32, 4)
		f.Call(one, one, one)
		return nil
	})
}

// Past MaxTracedSignatures distinct input shapes the traces are dropped, so
// the shapes in use are traced again rather than the cache growing.
func TestCompiledKeepsABoundedSetOfTraces(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		traces, calls := 0, 0
		f := mlx.Compile("negate", 1, func(in []*mlx.Array) []*mlx.Array {
			traces++
			return []*mlx.Array{mlx.Negative(in[0])}
		})
		call := func(n int) {
			calls++
			v := t.Float32s(f.Call(mlx.Ones(mlx.Float32, n))[0])
			if len(v) != n || v[n-1] != -1 {
				t.Fatalf("negate(ones(%d)) = %v", n, v)
			}
		}
		for n := 1; n <= mlx.MaxTracedSignatures; n++ {
			call(n)
		}
		call(1)                             // still held: no trace
		call(mlx.MaxTracedSignatures + 1)   // one too many: traces dropped, this one traced
		call(1)                             // traced again
		want := mlx.MaxTracedSignatures + 2 // by the policy above
		if !fusionExpected() {
			want = calls // without compilation the Go function runs every call
		}
		if traces != want {
			t.Fatalf("the Go function ran %d times over %d calls, want %d", traces, calls, want)
		}
	})
}

// A compiled function may return many outputs (a compiled run of layers
// returns every layer's states): 40 outputs x + i, checked against the
// values computed by hand, twice (the trace, then its replay).
func TestCompiledReturnsManyOutputs(t *testing.T) {
	const n = 40
	f := mlx.Compile("many", n, func(in []*mlx.Array) []*mlx.Array {
		out := make([]*mlx.Array, n)
		for i := range out {
			out[i] = mlx.AddScalar(in[0], float64(i))
		}
		return out
	})
	mlxtest.Run(t, func(t *mlxtest.T) {
		defer f.Free()
		for call := range 2 {
			x := mlx.FromFloat32s([]float32{1, 2}, 2)
			outs := f.Call(x)
			if len(outs) != n {
				t.Fatalf("call %d: %d outputs, want %d", call, len(outs), n)
			}
			for i, o := range outs {
				got := t.Float32s(o)
				if got[0] != float32(1+i) || got[1] != float32(2+i) {
					t.Fatalf("call %d: output %d = %v, want [%d %d]", call, i, got, 1+i, 2+i)
				}
			}
		}
	})
}
