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

// headers returns the tensors' header entries, without their bytes.
func headers(tensors []Tensor) []TensorHeader {
	var hs []TensorHeader
	for _, t := range tensors {
		hs = append(hs, TensorHeader{Name: t.Name, DType: t.DType, Shape: t.Shape})
	}
	return hs
}

// streamData writes the tensors' bytes through w in the order it asks for,
// in pieces of at most piece bytes that straddle tensor boundaries, as a
// producer of fixed-size chunks would.
func streamData(t *testing.T, w *Writer, tensors []Tensor, piece int) {
	t.Helper()
	var data []byte
	for _, i := range w.Order() {
		data = append(data, tensors[i].Data...)
	}
	if uint64(len(data)) != w.Size() {
		t.Fatalf("Size() = %d, the tensors hold %d bytes", w.Size(), len(data))
	}
	for len(data) > 0 {
		n := min(piece, len(data))
		if _, err := w.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
}

// The streaming writer makes the reference crate's files byte for byte
// from headers and bytes given in pieces.
func TestStreamingWriterReproducesCrateGoldenFiles(t *testing.T) {
	for _, c := range loadGolden(t) {
		t.Run(c.File, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", "golden", c.File))
			if err != nil {
				t.Fatal(err)
			}
			tensors := c.tensors(t)
			var got bytes.Buffer
			w, err := NewWriter(&got, headers(tensors), c.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			streamData(t, w, tensors, 3)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("bytes differ from the crate's\n got %q\nwant %q", got.Bytes(), want)
			}
		})
	}
}

// A data section shorter or longer than the header declares is refused,
// naming the tensor at fault, and Create then leaves no file behind.
func TestStreamingWriterRefusesWrongDataLength(t *testing.T) {
	tensors := []Tensor{f32("a", 2), {Name: "b", DType: U8, Shape: []uint64{3}, Data: []byte{1, 2, 3}}}
	t.Run("short", func(t *testing.T) {
		dir := t.TempDir()
		w, err := Create(filepath.Join(dir, "m.safetensors"), headers(tensors), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		w.Write(make([]byte, 9)) // a's 8 bytes and one of b's 3
		err = w.Close()
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrInvalidTensor) || e.Tensor != "b" || !strings.Contains(err.Error(), "closed after 1 of its 3 bytes (9 of the 11 data bytes") {
			t.Fatalf("Close = %v, want an ErrInvalidTensor naming b", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("folder holds %v after a short write", entries)
		}
	})
	t.Run("long", func(t *testing.T) {
		w, err := NewWriter(&bytes.Buffer{}, headers(tensors), nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(make([]byte, 10))
		if _, err := w.Write(make([]byte, 3)); !errors.Is(err, ErrInvalidTensor) || !strings.Contains(err.Error(), `tensor "b": 2 bytes written past the end`) {
			t.Fatalf("Write past the end = %v", err)
		}
		if err := w.Close(); !errors.Is(err, ErrInvalidTensor) {
			t.Fatalf("Close after a refused write = %v, want the same error", err)
		}
	})
}

// Create writes under a temporary name: path appears only at a successful
// Close, readable by all as os.WriteFile(…, 0o644) makes files; Abort
// removes the temporary file, and nothing more can be written.
func TestCreateAppearsOnlyAtClose(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.safetensors")
	tensors := []Tensor{f32("x", 3, 2), {Name: "y", DType: BF16, Shape: []uint64{5}, Data: bytes.Repeat([]byte{7}, 10)}}

	w, err := Create(p, headers(tensors), map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(tensors[0].Data[:5])
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists before Close (%v)", p, err)
	}
	w.Abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("folder holds %v after Abort", entries)
	}
	if _, err := w.Write([]byte{1}); err == nil {
		t.Fatal("a write after Abort was accepted")
	}

	w, err = Create(p, headers(tensors), map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	streamData(t, w, tensors, 7)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Abort() // after Close: nothing to undo
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := Write(&want, tensors, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Error("Create wrote other bytes than Write")
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", st.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("folder holds %v, want the file alone", entries)
	}
}
