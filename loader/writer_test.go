package loader

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriterRefusesInconsistentTensors(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		tensor  string
		want    string
	}{
		{name: "data shorter than shape × dtype", tensors: []Tensor{{Name: "a", DType: F32, Shape: []uint64{3}, Data: make([]byte, 8)}},
			tensor: "a", want: "data holds 8 bytes but shape [3] of F32 needs 12"},
		{name: "sub-byte size not whole bytes", tensors: []Tensor{{Name: "a", DType: F4, Shape: []uint64{3}, Data: make([]byte, 2)}},
			tensor: "a", want: "12 bits, not a whole number of bytes"},
		{name: "shape overflow", tensors: []Tensor{{Name: "a", DType: U8, Shape: []uint64{1 << 32, 1 << 32}}},
			tensor: "a", want: "overflows 64 bits"},
		{name: "zero dtype", tensors: []Tensor{{Name: "a", Shape: []uint64{1}, Data: make([]byte, 1)}},
			tensor: "a", want: "invalid dtype DType(0)"},
		{name: "duplicate name", tensors: []Tensor{f32("a", 1), f32("a", 1)},
			tensor: "a", want: "name given twice"},
		{name: "reserved name", tensors: []Tensor{f32("__metadata__", 1)},
			tensor: "__metadata__", want: "reserved for the metadata map"},
		{name: "name not UTF-8", tensors: []Tensor{f32("a\xff", 1)},
			tensor: "a\xff", want: "not valid UTF-8"},
		{name: "metadata not UTF-8", meta: map[string]string{"k": "\xff"},
			want: `metadata entry "k" is not valid UTF-8`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Write(&out, tc.tensors, tc.meta)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalidTensor) {
				t.Fatalf("err = %v, want an ErrInvalidTensor *Error", err)
			}
			if e.Tensor != tc.tensor || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q (tensor %q), want tensor %q and %q", err, e.Tensor, tc.tensor, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("%d bytes written before the error", out.Len())
			}
		})
	}
}

func TestWriterRefusesHeaderOver100MB(t *testing.T) {
	name := strings.Repeat("n", MaxHeaderSize)
	err := Write(&bytes.Buffer{}, []Tensor{f32(name, 1)}, nil)
	if !errors.Is(err, ErrHeaderTooLarge) || !strings.Contains(err.Error(), "over the 100 MB limit") {
		t.Fatalf("err = %v, want ErrHeaderTooLarge", err)
	}
}

func TestWriterLayout(t *testing.T) {
	var out bytes.Buffer
	tensors := []Tensor{f32("b", 1), {Name: "c", DType: U8, Shape: []uint64{3}, Data: []byte{1, 2, 3}}, {Name: "z", DType: I64, Data: make([]byte, 8)}, f32("a", 1)}
	if err := Write(&out, tensors, map[string]string{"y": "2", "x": "1"}); err != nil {
		t.Fatal(err)
	}
	const want = `{"__metadata__":{"x":"1","y":"2"},"z":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]},"c":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}}`
	b := out.Bytes()
	n := int(b[0]) | int(b[1])<<8
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	if got := string(b[8 : 8+n]); strings.TrimRight(got, " ") != want {
		t.Errorf("header\n got %s\nwant %s", got, want)
	}
	if len(b) != 8+n+19 {
		t.Errorf("file is %d bytes, want %d", len(b), 8+n+19)
	}
	if tensors[0].Name != "b" {
		t.Error("Write reordered the caller's slice")
	}
}

func TestWriteFileLeavesNoPartialFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.safetensors")
	if err := WriteFile(p, []Tensor{{Name: "a", DType: F32, Shape: []uint64{2}}}, nil); err == nil {
		t.Fatal("inconsistent tensor written")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("folder holds %v after a failed write", entries)
	}
}

func TestDTypeTable(t *testing.T) {
	// Section 2 of spec/safetensors.md, in alignment order.
	want := []struct {
		name string
		bits uint64
	}{
		{"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8},
		{"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},
		{"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32},
		{"F32", 32}, {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64},
	}
	all := DTypes()
	if len(all) != len(want) {
		t.Fatalf("%d dtypes, want %d", len(all), len(want))
	}
	for i, w := range want {
		d, ok := ParseDType(w.name)
		if !ok || d != all[i] || d.String() != w.name || d.Bits() != w.bits {
			t.Errorf("%s: ParseDType = %v %v, position %v, bits %d; want position %d, %d bits", w.name, d, ok, all[i], d.Bits(), i, w.bits)
		}
	}
	for _, bad := range []string{"", "f32", "FLOAT32", "F8", "BF16 "} {
		if _, ok := ParseDType(bad); ok {
			t.Errorf("ParseDType(%q) accepted", bad)
		}
	}
	if DType(0).Valid() || DType(0).String() != "DType(0)" || DType(0).Bits() != 0 {
		t.Error("the zero DType is not invalid")
	}
}
