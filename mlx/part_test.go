package mlx_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// partFixture writes a safetensors file by hand holding one float32 tensor
// [5, 6] whose entry (i, j) is 10·i + j, and returns its path and the
// absolute offset of the tensor's first byte.
func partFixture(t *testing.T) (string, int64) {
	return wideFixture(t, 5, 6, 10)
}

// wideFixture is partFixture for a tensor [rows, cols] whose entry (i, j)
// is k·i + j.
func wideFixture(t *testing.T, rows, cols, k int) (string, int64) {
	header := fmt.Sprintf(`{"w":{"dtype":"F32","shape":[%d,%d],"data_offsets":[0,%d]}}`, rows, cols, 4*rows*cols)
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	for i := range rows {
		for j := range cols {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(k*i+j)))
		}
	}
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, int64(8 + len(header))
}

// LoadPart reads rows, columns and several ranges of the rows of a stored
// tensor; the expected values are the fixture's formula, and the whole
// tensor read by MLX's own loader and sliced agrees.
func TestLoadPart(t *testing.T) {
	path, base := partFixture(t)
	const row = 6 * 4 // bytes of one row
	cases := []struct {
		name  string
		shape []int
		part  mlx.FilePart
		want  []float32
	}{
		{"rows 1…2", []int{2, 6}, mlx.FilePart{Offset: base + row, Blocks: 1, Ranges: ranges(0, 2*row)},
			[]float32{10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25}},
		{"rows 0 and 3…4", []int{3, 6}, mlx.FilePart{Offset: base, Blocks: 1, Ranges: ranges(0, row, 3*row, 2*row)},
			[]float32{0, 1, 2, 3, 4, 5, 30, 31, 32, 33, 34, 35, 40, 41, 42, 43, 44, 45}},
		{"columns 2…3", []int{5, 2}, mlx.FilePart{Offset: base, Blocks: 5, Stride: row, Ranges: ranges(8, 8)},
			[]float32{2, 3, 12, 13, 22, 23, 32, 33, 42, 43}},
		{"columns 0 and 4…5 of rows 2…3", []int{2, 3}, mlx.FilePart{Offset: base + 2*row, Blocks: 2, Stride: row, Ranges: ranges(0, 4, 16, 8)},
			[]float32{20, 24, 25, 30, 34, 35}},
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		f, err := mlx.OpenTensorFile(path)
		t.NoErr(err)
		defer f.Close()
		whole, err := mlx.LoadSafetensors(path)
		t.NoErr(err)
		for _, c := range cases {
			a, err := f.LoadPart("F32", c.shape, c.part)
			t.NoErr(err)
			t.Shape(a, c.shape...)
			if got := t.Float32s(a); !slices.Equal(got, c.want) {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
			if c.part.Bytes() != int64(4*len(c.want)) {
				t.Errorf("%s: Bytes() = %d, want %d", c.name, c.part.Bytes(), 4*len(c.want))
			}
		}
		if whole["w"].Evaluated() {
			t.Errorf("reading parts evaluated the whole tensor")
		}
		// The same columns through the whole read.
		cols := mlx.SliceAxis(whole["w"], 1, 2, 4)
		if got := t.Float32s(cols); !slices.Equal(got, cases[2].want) {
			t.Errorf("whole read, columns 2…3: %v, want %v", got, cases[2].want)
		}
		if !whole["w"].Evaluated() {
			t.Errorf("the whole tensor is not Evaluated after a slice of it was")
		}
	})
}

// Columns whose rows lie more than a page apart are read piece by piece,
// those closer through a window, and runs longer than the window are split:
// the values are the fixture's formula either way.
func TestLoadPartWideRows(t *testing.T) {
	const rows, cols = 16, 1 << 17 // a row is 512 KiB, 16 rows 8 MiB
	path, base := wideFixture(t, rows, cols, cols)
	const row = 4 * cols
	cases := []struct {
		name       string
		start, end int // columns
	}{
		{"gaps longer than a page", 1000, 1500},
		{"gaps shorter than a page", 100, cols - 100},
		{"half of each row", 0, cols / 2},
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		f, err := mlx.OpenTensorFile(path)
		t.NoErr(err)
		defer f.Close()
		for _, c := range cases {
			w := c.end - c.start
			a, err := f.LoadPart("F32", []int{rows, w}, mlx.FilePart{Offset: base, Blocks: rows, Stride: row, Ranges: ranges(int64(4*c.start), int64(4*w))})
			t.NoErr(err)
			got := t.Float32s(a)
			for i := range rows {
				for j := range w {
					if want := float32(i*cols + c.start + j); got[i*w+j] != want {
						t.Fatalf("%s: entry (%d, %d) is %v, want %v", c.name, i, j, got[i*w+j], want)
					}
				}
			}
		}
	})
}

// A part of 32 MiB or more is read by several threads, each from its own
// point of the part (mid-row here): rows, and columns a page apart.
func TestLoadPartInParallel(t *testing.T) {
	const rows, cols = 32, 1 << 19 // a row is 2 MiB, the tensor 64 MiB; entries stay below 2²⁴
	path, base := wideFixture(t, rows, cols, cols)
	const row = 4 * cols
	cases := []struct {
		name                string
		r0, r1, start, stop int // rows and columns
	}{
		{"20 rows", 5, 25, 0, cols},
		{"columns", 0, rows, 3000, cols - 1000},
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		f, err := mlx.OpenTensorFile(path)
		t.NoErr(err)
		defer f.Close()
		for _, c := range cases {
			h, w := c.r1-c.r0, c.stop-c.start
			a, err := f.LoadPart("F32", []int{h, w}, mlx.FilePart{Offset: base + int64(c.r0)*row, Blocks: int64(h), Stride: row, Ranges: ranges(int64(4*c.start), int64(4*w))})
			t.NoErr(err)
			got := t.Float32s(a)
			for i := range h {
				for j := range w {
					if want := float32((c.r0+i)*cols + c.start + j); got[i*w+j] != want {
						t.Fatalf("%s: entry (%d, %d) is %v, want %v", c.name, i, j, got[i*w+j], want)
					}
				}
			}
		}
	})
}

// A part reaching past the end of the file, or malformed, is refused when
// it is made (naming the file), not when it is read.
func TestLoadPartRefusesOutOfBounds(t *testing.T) {
	path, base := partFixture(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		f, err := mlx.OpenTensorFile(path)
		t.NoErr(err)
		for _, p := range []mlx.FilePart{
			{Offset: base, Blocks: 6, Stride: 24, Ranges: ranges(0, 24)},
			{Offset: base + 100, Blocks: 1, Ranges: ranges(0, 24)},
			{Offset: base, Blocks: 0, Ranges: ranges(0, 24)},
			{Offset: base, Blocks: 1, Ranges: ranges(0, 0)},
		} {
			if _, err := f.LoadPart("F32", []int{6}, p); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("part %+v: %v, want an error naming %s", p, err, path)
			}
		}
		t.NoErr(f.Close())
		if _, err := f.LoadPart("F32", []int{6}, mlx.FilePart{Offset: base, Blocks: 1, Ranges: ranges(0, 24)}); err == nil {
			t.Errorf("LoadPart after Close succeeded")
		}
		t.NoErr(f.Close())
	})
}

// ranges pairs its arguments as byte ranges: start, length, start, length, …
func ranges(v ...int64) []mlx.ByteRange {
	var out []mlx.ByteRange
	for i := 0; i+1 < len(v); i += 2 {
		out = append(out, mlx.ByteRange{Start: v[i], Len: v[i+1]})
	}
	return out
}
