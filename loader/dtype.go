package loader

import "fmt"

// DType is a safetensors element type. The constants are declared in the
// order of the reference crate's Dtype enum, which is ascending alignment:
// the writer sorts tensors by descending DType value so that the most aligned
// tensors come first and stay aligned without padding.
type DType uint8

// The safetensors dtypes, in alignment order. The zero value is not a valid
// dtype, so a forgotten field is caught rather than read as BOOL.
const (
	BOOL DType = iota + 1
	F4         // OCP MXFP4 element (E2M1), two per byte
	F6_E2M3
	F6_E3M2
	U8
	I8
	F8_E5M2
	F8_E4M3
	F8_E8M0 // OCP MX scale
	F8_E4M3FNUZ
	F8_E5M2FNUZ
	I16
	U16
	F16
	BF16
	I32
	U32
	F32
	C64
	F64
	I64
	U64
)

// dtypeInfo holds each dtype's header name and width in bits, indexed by DType.
var dtypeInfo = [...]struct {
	name string
	bits uint64
}{
	BOOL:        {"BOOL", 8},
	F4:          {"F4", 4},
	F6_E2M3:     {"F6_E2M3", 6},
	F6_E3M2:     {"F6_E3M2", 6},
	U8:          {"U8", 8},
	I8:          {"I8", 8},
	F8_E5M2:     {"F8_E5M2", 8},
	F8_E4M3:     {"F8_E4M3", 8},
	F8_E8M0:     {"F8_E8M0", 8},
	F8_E4M3FNUZ: {"F8_E4M3FNUZ", 8},
	F8_E5M2FNUZ: {"F8_E5M2FNUZ", 8},
	I16:         {"I16", 16},
	U16:         {"U16", 16},
	F16:         {"F16", 16},
	BF16:        {"BF16", 16},
	I32:         {"I32", 32},
	U32:         {"U32", 32},
	F32:         {"F32", 32},
	C64:         {"C64", 64},
	F64:         {"F64", 64},
	I64:         {"I64", 64},
	U64:         {"U64", 64},
}

// DTypes returns every valid dtype in alignment order (ascending).
func DTypes() []DType {
	out := make([]DType, 0, len(dtypeInfo)-1)
	for d := BOOL; d <= U64; d++ {
		out = append(out, d)
	}
	return out
}

// ParseDType returns the dtype with the given header name ("BF16", "F8_E4M3",
// ...). Names are case-sensitive, as in the format; ok is false for any other
// string.
func ParseDType(name string) (d DType, ok bool) {
	for d := BOOL; d <= U64; d++ {
		if dtypeInfo[d].name == name {
			return d, true
		}
	}
	return 0, false
}

// Valid reports whether d is one of the declared dtypes.
func (d DType) Valid() bool { return d >= BOOL && d <= U64 }

// String returns the header name of d, or "DType(n)" for an invalid value.
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// Bits returns the width of one element in bits (4 for F4, 6 for the F6
// kinds, 8 to 64 for the others), or 0 for an invalid dtype. A tensor holds
// elements·Bits/8 bytes, which must be a whole number.
func (d DType) Bits() uint64 {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].bits
}
