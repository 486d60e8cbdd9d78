package nn

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// Suffixes of a quantized layer's tensors (mlx-lm's module layout): a layer
// at module path p is quantized iff p.scales exists.
const (
	WeightSuffix = ".weight"
	ScalesSuffix = ".scales"
	BiasesSuffix = ".biases"
)

// IsQuantized reports whether the layer at module path (the tensor name
// without ".weight") is stored quantized: its ".scales" tensor exists.
func IsQuantized(tensors map[string]*mlx.Array, path string) bool {
	_, ok := tensors[path+ScalesSuffix]
	return ok
}

// LoadLinear binds the linear layer at module path from a checkpoint's
// tensors: path.weight of logical shape [..., out, in] (shape), dense or
// quantized. A dense weight is cast to dtype. A quantized one (path.scales
// exists) takes its parameters from quant (the per-module override, else
// the default); when those do not fit the stored shapes, they are inferred
// from the shapes as mlx-lm does (group = in / scales columns, bits =
// 32 · packed columns / in, the mode from the scales' dtype), so a
// checkpoint whose config lacks an override still loads. Affine scales and
// biases are cast to dtype (quantized_matmul wants them in x's dtype); the
// uint8 scales of the other modes stay as stored. used lists the tensor
// names read, also on error; errors name the tensor, what was found and
// what was expected. The layer's additive bias (path.bias) is not read here.
func LoadLinear(tensors map[string]*mlx.Array, path string, quant *loader.Quantization, dtype mlx.DType, shape ...int) (l *Linear, used []string, err error) {
	wName := path + WeightSuffix
	w, ok := tensors[wName]
	if !ok {
		return nil, nil, fmt.Errorf("%s is missing", wName)
	}
	used = append(used, wName)
	if !w.Valid() {
		return nil, used, fmt.Errorf("%s is an empty array: the MLX op that produced it failed", wName)
	}
	scales, quantized := tensors[path+ScalesSuffix]
	if !quantized {
		if !w.DType().IsFloat() {
			return nil, used, fmt.Errorf("%s has dtype %s and no %s beside it: want a float weight, or a quantized one with its scales", wName, w.DType(), path+ScalesSuffix)
		}
		if !slices.Equal(w.Shape(), shape) {
			return nil, used, fmt.Errorf("%s is %v, want %v", wName, w.Shape(), shape)
		}
		return Dense(cast(w, dtype), nil), used, nil
	}
	used = append(used, path+ScalesSuffix)
	biases, hasBiases := tensors[path+BiasesSuffix]
	if hasBiases {
		used = append(used, path+BiasesSuffix)
	}
	q, err := quantOf(path, w, scales, biases, quant, shape)
	if err != nil {
		return nil, used, err
	}
	if q.HasBiases() != hasBiases {
		if hasBiases {
			return nil, used, fmt.Errorf("%s exists but %s quantization has no biases", path+BiasesSuffix, q.Mode)
		}
		return nil, used, fmt.Errorf("%s is missing: %s quantization stores biases beside %s", path+BiasesSuffix, q.Mode, path+ScalesSuffix)
	}
	if err := CheckQuantSupport(q, dtype); err != nil {
		return nil, used, fmt.Errorf("%s: %w", path, err)
	}
	l = &Linear{Weight: w, Scales: scales, Quant: q}
	if q.Mode == mlx.Affine {
		l.Scales = cast(scales, dtype)
		l.Biases = cast(biases, dtype)
	}
	return l, used, nil
}

// quantOf returns the quantization of the layer at path and checks the
// stored shapes and dtypes against it.
func quantOf(path string, w, scales, biases *mlx.Array, quant *loader.Quantization, shape []int) (mlx.Quant, error) {
	wName, sName := path+WeightSuffix, path+ScalesSuffix
	if quant == nil {
		return mlx.Quant{}, fmt.Errorf("%s exists but config.json has no \"quantization\" section: the checkpoint is incomplete (download config.json again)", sName)
	}
	if w.DType() != mlx.Uint32 {
		return mlx.Quant{}, fmt.Errorf("%s has dtype %s: a quantized weight (beside %s) is packed uint32", wName, w.DType(), sName)
	}
	if !scales.Valid() || (biases != nil && !biases.Valid()) {
		return mlx.Quant{}, fmt.Errorf("%s: an empty array (the MLX op that produced it failed)", path)
	}
	n := len(shape)
	lead, in := shape[:n-1], shape[n-1]
	fits := func(q mlx.Quant) bool {
		packed, ok := q.PackedDim(in)
		if !ok || q.Validate() != nil {
			return false
		}
		want := append(slices.Clone(lead), packed)
		groups := append(slices.Clone(lead), in/q.GroupSize)
		if !slices.Equal(w.Shape(), want) || !slices.Equal(scales.Shape(), groups) {
			return false
		}
		if biases != nil && !slices.Equal(biases.Shape(), groups) {
			return false
		}
		return (scales.DType() == mlx.Uint8) == (q.Mode != mlx.Affine)
	}
	q := quant.For(path)
	if q.IsZero() {
		return q, fmt.Errorf("%s exists but config.json's quantization marks %s as not quantized", sName, path)
	}
	if fits(q) {
		return q, nil
	}
	// mlx-lm's rule for layers the config does not describe correctly.
	if inferred, ok := InferQuant(w, scales, in); ok && fits(inferred) {
		slog.Debug("nn: quantization inferred from the tensor shapes", "layer", path, "config", q.String(), "inferred", inferred.String())
		return inferred, nil
	}
	packed, _ := q.PackedDim(in)
	return q, fmt.Errorf("%s is %s%v with %s %s%v: does not match a [%s] layer quantized %s (want %s%v and scales %v)",
		wName, w.DType(), w.Shape(), sName, scales.DType(), scales.Shape(), joinInts(shape), q,
		mlx.Uint32, append(slices.Clone(lead), packed), append(slices.Clone(lead), in/max(q.GroupSize, 1)))
}

// InferQuant recovers how a weight of logical input dimension in was
// quantized from its packed weight and scales, as mlx-lm does for layers
// its config does not describe: group size = in / scale columns, bits =
// 32 · packed columns / in, and the mode from the scales' dtype (float:
// affine; uint8: the fp mode with those bits and group size). ok is false
// when no valid quantization fits.
func InferQuant(w, scales *mlx.Array, in int) (q mlx.Quant, ok bool) {
	if w.NDim() < 2 || scales.NDim() != w.NDim() || scales.Dim(-1) <= 0 || in <= 0 {
		return q, false
	}
	q = mlx.Quant{Mode: mlx.Affine, GroupSize: in / scales.Dim(-1), Bits: w.Dim(-1) * 32 / in}
	if scales.DType() == mlx.Uint8 {
		q.Mode = ""
		for _, mode := range []mlx.QuantMode{mlx.MXFP4, mlx.NVFP4, mlx.MXFP8} {
			if d, _ := mlx.DefaultQuant(mode); d.Bits == q.Bits && d.GroupSize == q.GroupSize {
				q.Mode = mode
			}
		}
	}
	packed, fits := q.PackedDim(in)
	return q, fits && packed == w.Dim(-1) && q.Validate() == nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// LoadEmbedding binds a token embedding table at module path, [vocab, hidden],
// dense or quantized, as LoadLinear does; Lookup returns dtype.
func LoadEmbedding(tensors map[string]*mlx.Array, path string, quant *loader.Quantization, dtype mlx.DType, vocab, hidden int) (*Embedding, []string, error) {
	l, used, err := LoadLinear(tensors, path, quant, dtype, vocab, hidden)
	if err != nil {
		return nil, used, err
	}
	return &Embedding{Table: l, DType: dtype}, used, nil
}

// support caches CheckQuantSupport's and CheckGatherSupport's answers per
// device and parameters.
var support = struct {
	sync.Mutex
	m map[supportKey]error
}{m: map[supportKey]error{}}

type supportKey struct {
	dev    mlx.Device
	q      mlx.Quant
	dtype  mlx.DType
	gather bool // CheckGatherSupport's question
}

// CheckQuantSupport reports whether the current device's MLX backend runs q
// with activations in dtype: it quantizes a small matrix and evaluates a one-row and a multi-row
// quantized matmul (decode and prefill take different kernels on GPUs) and
// a dequantize (embedding lookups). The answer is cached per device. An
// error names the quantization and the backend, so a checkpoint that the
// backend cannot run fails at load with that message, not mid-generation.
// It must run on the MLX worker, and evaluates: call it before building
// graphs whose pending errors would be consumed.
func CheckQuantSupport(q mlx.Quant, dtype mlx.DType) error {
	return checkSupport(supportKey{mlx.CurrentDevice(), q, dtype, false}, func() error { return probe(q, dtype) },
		func(backend string) string {
			return fmt.Sprintf("quantization %s is not supported with %s activations by MLX %s's %s backend", q, dtype, mlx.Version(), backend)
		})
}

// CheckGatherSupport reports, as CheckQuantSupport does and cached alike,
// whether the current device's MLX backend runs the gathered expert
// products of Linear.Gather with operands in dtype: gather_mm for dense
// stacked weights (q zero), gather_qmm for weights quantized with q, with
// unsorted and sorted indices. (MLX 0.32.4's CPU backend runs gather_mm in
// float32 only.)
func CheckGatherSupport(q mlx.Quant, dtype mlx.DType) error {
	return checkSupport(supportKey{mlx.CurrentDevice(), q, dtype, true}, func() error { return probeGather(q, dtype) },
		func(backend string) string {
			op := "gather_mm"
			if !q.IsZero() {
				op = "gather_qmm (" + q.String() + ")"
			}
			return fmt.Sprintf("expert products (%s) with %s operands are not supported by MLX %s's %s backend", op, dtype, mlx.Version(), backend)
		})
}

func checkSupport(key supportKey, probe func() error, what func(backend string) string) error {
	support.Lock()
	defer support.Unlock()
	if err, ok := support.m[key]; ok {
		return err
	}
	err := probe()
	if err != nil {
		backend := "CPU"
		if key.dev == mlx.GPU {
			backend = "GPU (CUDA)"
		}
		err = fmt.Errorf("%s: %v", what(backend), err)
	}
	support.m[key] = err
	return err
}

// probeMatrix is a small [out, in] weight in dtype for the probes.
func probeMatrix(out, in int, dtype mlx.DType) *mlx.Array {
	w := mlx.Reshape(mlx.Arange(0, float64(out*in), 1, mlx.Float32), out, in)
	return cast(mlx.MultiplyScalar(mlx.Sin(w), 0.1), dtype)
}

func probe(q mlx.Quant, dtype mlx.DType) error {
	if err := q.Validate(); err != nil {
		return err
	}
	const out, in = 32, 128
	wq, s, b := mlx.Quantize(probeMatrix(out, in, dtype), q)
	x1 := mlx.Ones(dtype, 1, in)
	x8 := mlx.Ones(dtype, 8, in)
	return mlx.Eval(
		mlx.QuantizedMatmul(x1, wq, s, b, q, true),
		mlx.QuantizedMatmul(x8, wq, s, b, q, true),
		mlx.Dequantize(wq, s, b, q, dtype))
}

func probeGather(q mlx.Quant, dtype mlx.DType) error {
	const experts, out, in = 4, 32, 128
	w := mlx.Reshape(probeMatrix(experts*out, in, dtype), experts, out, in)
	l := Dense(w, nil)
	if !q.IsZero() {
		if err := q.Validate(); err != nil {
			return err
		}
		wq, s, b := mlx.Quantize(w, q)
		l = &Linear{Weight: wq, Scales: s, Biases: b, Quant: q}
	}
	x := mlx.Ones(dtype, 3, 1, in)
	return mlx.Eval(
		l.Gather(x, mlx.FromInt32s([]int32{2, 0, 3}, 3), false),
		l.Gather(x, mlx.FromInt32s([]int32{0, 1, 1}, 3), true))
}
