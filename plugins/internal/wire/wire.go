// Package wire converts between MLX arrays and the tensors and probability
// rows of the draft plugin protocol (spec/plugins.md section 4): raw
// little-endian, row-major bytes named by their safetensors dtype. The host
// and the SDK share it so that both sides read the same bytes the same way.
package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
)

// dtypeNames maps MLX dtypes to safetensors dtype names.
var dtypeNames = map[mlx.DType]string{
	mlx.Bool: "BOOL", mlx.Uint8: "U8", mlx.Uint16: "U16", mlx.Uint32: "U32", mlx.Uint64: "U64",
	mlx.Int8: "I8", mlx.Int16: "I16", mlx.Int32: "I32", mlx.Int64: "I64",
	mlx.Float16: "F16", mlx.Float32: "F32", mlx.Float64: "F64", mlx.BFloat16: "BF16",
}

// DTypeName returns the safetensors name of d ("BF16" for bfloat16).
func DTypeName(d mlx.DType) (string, error) {
	if n, ok := dtypeNames[d]; ok {
		return n, nil
	}
	return "", fmt.Errorf("dtype %s has no safetensors name", d)
}

// ParseDType maps a safetensors dtype name to its MLX dtype.
func ParseDType(name string) (mlx.DType, error) {
	for d, n := range dtypeNames {
		if n == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown tensor dtype %q (want a safetensors name: BF16, F16, F32, I32, ...)", name)
}

// Encode reads a (evaluating it) into a wire tensor of its own dtype. It
// must run on the MLX worker.
func Encode(a *mlx.Array) (*draftv1.Tensor, error) {
	name, err := DTypeName(a.DType())
	if err != nil {
		return nil, err
	}
	data, err := a.Bytes()
	if err != nil {
		return nil, err
	}
	shape := a.Shape()
	t := &draftv1.Tensor{Dtype: name, Shape: make([]int64, len(shape)), Data: data}
	for i, d := range shape {
		t.Shape[i] = int64(d)
	}
	return t, nil
}

// Decode checks t (known dtype, non-negative shape, data length equal to the
// shape's size) and copies it into a new array. It must run on the MLX
// worker.
func Decode(t *draftv1.Tensor) (*mlx.Array, error) {
	if t == nil {
		return nil, fmt.Errorf("tensor missing")
	}
	d, err := ParseDType(t.Dtype)
	if err != nil {
		return nil, err
	}
	shape := make([]int, len(t.Shape))
	n := int64(1)
	for i, s := range t.Shape {
		if s < 0 || s > math.MaxInt32 {
			return nil, fmt.Errorf("tensor shape %v has an invalid dimension", t.Shape)
		}
		shape[i] = int(s)
		n *= s
		if n > math.MaxInt64/16 {
			return nil, fmt.Errorf("tensor shape %v is too large", t.Shape)
		}
	}
	if want := n * int64(d.Size()); int64(len(t.Data)) != want {
		return nil, fmt.Errorf("tensor %s%v holds %d bytes, want %d", t.Dtype, t.Shape, len(t.Data), want)
	}
	return mlx.FromBytes(t.Data, d, shape...), nil
}

// Float32Bytes encodes v as little-endian float32s.
func Float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// BytesFloat32 decodes little-endian float32s; len(b) must be a multiple of 4.
func BytesFloat32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
