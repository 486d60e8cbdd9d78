package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestOpenAcceptsValidEdgeCases(t *testing.T) {
	tests := []struct {
		name   string
		file   []byte
		want   []string // tensor names in file order
		hasMD  bool
		sizeOf map[string]int64
	}{
		{name: "empty header padded to 8 bytes", file: rawFile(8, "{}      ", 0)},
		{name: "unpadded header", file: rawFile(2, "{}", 0)},
		{name: "header padded with any JSON whitespace",
			file: rawFile(uint64(len(`{"a":`+entry+"}\n\t\r ")), `{"a":`+entry+"}\n\t\r ", 8), want: []string{"a"}},
		{name: "unknown fields in an entry are ignored",
			file: stFile(`{"a":{"x":{"y":[1,{"z":null}]},"dtype":"F32","shape":[2],"data_offsets":[0,8],"w":-1.5e3}}`, 8), want: []string{"a"}},
		{name: "null metadata means none, as in the crate",
			file: stFile(`{"__metadata__":null,"a":`+entry+`}`, 8), want: []string{"a"}},
		{name: "metadata after the tensors",
			file: stFile(`{"a":`+entry+`,"__metadata__":{"format":"pt"}}`, 8), want: []string{"a"}, hasMD: true},
		{name: "file order is offset order, not header order",
			file: stFile(`{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8),
			want: []string{"a", "b"}},
		{name: "zero-size tensors share an offset, ordered by name",
			file: stFile(`{"z":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"y":{"dtype":"I64","shape":[0],"data_offsets":[0,0]},"x":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, 1),
			want: []string{"y", "z", "x"}, sizeOf: map[string]int64{"x": 1, "y": 0, "z": 0}},
		{name: "huge dimension times zero is an empty tensor",
			file: stFile(`{"a":{"dtype":"F64","shape":[18446744073709551615,0],"data_offsets":[0,0]}}`, 0), want: []string{"a"}},
		{name: "sub-byte dtypes on byte boundaries",
			file: stFile(`{"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},"b":{"dtype":"F6_E3M2","shape":[4],"data_offsets":[3,6]}}`, 6),
			want: []string{"a", "b"}, sizeOf: map[string]int64{"a": 3, "b": 3}},
		{name: "escaped names and a surrogate pair",
			file: stFile(`{"\ud83d\ude00\n\"q\"":`+entry+`}`, 8), want: []string{"😀\n\"q\""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Open(writeFile(t, t.TempDir(), "m.safetensors", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var names []string
			for _, ti := range f.Tensors() {
				names = append(names, ti.Name)
				if want, ok := tc.sizeOf[ti.Name]; ok && ti.Size != want {
					t.Errorf("tensor %q: size %d, want %d", ti.Name, ti.Size, want)
				}
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("tensors %q, want %q", names, tc.want)
			}
			if (f.Metadata() != nil) != tc.hasMD {
				t.Errorf("metadata %v, want present=%v", f.Metadata(), tc.hasMD)
			}
		})
	}
}

func TestTensorInfoGivesAbsoluteOffsets(t *testing.T) {
	dir := t.TempDir()
	p := writeST(t, dir, "m.safetensors", []Tensor{f32("a", 2, 3), {Name: "b", DType: I64, Shape: []uint64{}, Data: make([]byte, 8)}}, map[string]string{"format": "pt"})
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(binary.LittleEndian.Uint64(raw))
	b, _ := f.Tensor("b")
	a, _ := f.Tensor("a")
	// I64 sorts before F32 (alignment), so b comes first in the data.
	if b.Offset != 8+n || a.Offset != 8+n+8 || a.Size != 24 || b.Size != 8 {
		t.Fatalf("offsets a=%d+%d b=%d+%d, header %d", a.Offset, a.Size, b.Offset, b.Size, n)
	}
	if !bytes.Equal(raw[a.Offset:a.Offset+a.Size], f32("a", 2, 3).Data) {
		t.Error("Offset does not point at the tensor's bytes")
	}
	if a.Elements() != 6 || b.Elements() != 1 || a.Path != p {
		t.Errorf("Elements a=%d b=%d, Path %q", a.Elements(), b.Elements(), a.Path)
	}
}

func TestDataAccess(t *testing.T) {
	p := writeST(t, t.TempDir(), "m.safetensors", []Tensor{f32("a", 4), f32("empty", 0)}, nil)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	want := f32("a", 4).Data

	t.Run("Bytes maps the file", func(t *testing.T) {
		got, err := f.Bytes("a")
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Bytes = %x, %v; want %x", got, err, want)
		}
		if cap(got) != len(got) {
			t.Errorf("cap %d > len %d: append could write into the mapping", cap(got), len(got))
		}
	})
	t.Run("Bytes of a zero-size tensor", func(t *testing.T) {
		got, err := f.Bytes("empty")
		if err != nil || len(got) != 0 {
			t.Fatalf("Bytes = %x, %v", got, err)
		}
	})
	t.Run("Reader reads the same bytes", func(t *testing.T) {
		r, err := f.Reader("a")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Reader = %x, %v; want %x", got, err, want)
		}
	})
	t.Run("unknown tensor", func(t *testing.T) {
		_, err := f.Bytes("nope")
		if !errors.Is(err, ErrTensorNotFound) || !strings.Contains(err.Error(), `tensor "nope"`) {
			t.Fatalf("err = %v, want ErrTensorNotFound naming the tensor", err)
		}
		if _, err := f.Reader("nope"); !errors.Is(err, ErrTensorNotFound) {
			t.Fatalf("Reader err = %v", err)
		}
	})
	t.Run("Bytes after Close", func(t *testing.T) {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Bytes("a"); !errors.Is(err, fs.ErrClosed) {
			t.Fatalf("err = %v, want fs.ErrClosed", err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func TestBytesFallsBackToReadAtWithoutMmap(t *testing.T) {
	f, err := Open(writeST(t, t.TempDir(), "m.safetensors", []Tensor{f32("a", 4)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.mapErr = errors.New("mmap unavailable") // as on a platform without mmap
	got, err := f.Bytes("a")
	if err != nil || !bytes.Equal(got, f32("a", 4).Data) {
		t.Fatalf("Bytes = %x, %v", got, err)
	}
}

func TestBytesRefusesTensorsOutsideAShrunkFile(t *testing.T) {
	p := writeST(t, t.TempDir(), "m.safetensors", []Tensor{f32("a", 4), f32("b", 4)}, nil)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(p, f.Size()-8); err != nil {
		t.Fatal(err)
	}
	f.mapErr = errors.New("force ReadAt") // a mapping of a shrunk file faults instead
	if _, err := f.Bytes("b"); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("err = %v, want ErrOutOfBounds", err)
	}
}

func TestOpenRefusesAFolder(t *testing.T) {
	_, err := Open(t.TempDir())
	if !errors.Is(err, ErrNotSafetensors) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenMissingFileIsNotExist(t *testing.T) {
	_, err := Open("testdata/no-such.safetensors")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

// A header length field is untrusted: a small file that claims a large
// header must be refused without allocating anything like that size.
func TestHeaderLengthDoesNotSizeAllocations(t *testing.T) {
	for _, n := range []uint64{MaxHeaderSize, MaxHeaderSize + 1, 1 << 62} {
		data := rawFile(n, "{}", 0)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := decode("x.safetensors", bytes.NewReader(data), int64(len(data)))
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("N=%d accepted", n)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
			t.Errorf("N=%d: %d bytes allocated before refusing", n, alloc)
		}
	}
}
