package mlx

import "fmt"

// DType is an element type of an array.
type DType int

// The dtypes specula uses. Values are the shim's codes (mlx/shim/shim.h).
const (
	Bool      DType = 0
	Uint8     DType = 1
	Uint16    DType = 2
	Uint32    DType = 3
	Uint64    DType = 4
	Int8      DType = 5
	Int16     DType = 6
	Int32     DType = 7
	Int64     DType = 8
	Float16   DType = 9
	Float32   DType = 10
	Float64   DType = 11
	BFloat16  DType = 12
	Complex64 DType = 13
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Bool:      {"bool", 1},
	Uint8:     {"uint8", 1},
	Uint16:    {"uint16", 2},
	Uint32:    {"uint32", 4},
	Uint64:    {"uint64", 8},
	Int8:      {"int8", 1},
	Int16:     {"int16", 2},
	Int32:     {"int32", 4},
	Int64:     {"int64", 8},
	Float16:   {"float16", 2},
	Float32:   {"float32", 4},
	Float64:   {"float64", 8},
	BFloat16:  {"bfloat16", 2},
	Complex64: {"complex64", 8},
}

func (d DType) valid() bool { return d >= 0 && int(d) < len(dtypeInfo) }

// String is the dtype's name as MLX spells it ("bfloat16", "float32", ...).
func (d DType) String() string {
	if !d.valid() {
		return fmt.Sprintf("dtype(%d)", int(d))
	}
	return dtypeInfo[d].name
}

// Size is the width of one element in bytes.
func (d DType) Size() int {
	if !d.valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// IsFloat reports whether d is a real floating-point type.
func (d DType) IsFloat() bool {
	return d == Float16 || d == Float32 || d == Float64 || d == BFloat16
}

// ParseDType maps a name ("float32", "bfloat16", "float16", "int32", ...) to
// its DType.
func ParseDType(name string) (DType, error) {
	for d := range dtypeInfo {
		if dtypeInfo[d].name == name {
			return DType(d), nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q (known: float32, bfloat16, float16, int32, ...)", name)
}
