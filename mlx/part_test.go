package mlx_test

import (
	"encoding/binary"
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
	header := `{"w":{"dtype":"F32","shape":[5,6],"data_offsets":[0,120]}}`
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	for i := range 5 {
		for j := range 6 {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(10*i+j)))
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
		// The same columns through the whole read.
		cols := mlx.SliceAxis(whole["w"], 1, 2, 4)
		if got := t.Float32s(cols); !slices.Equal(got, cases[2].want) {
			t.Errorf("whole read, columns 2…3: %v, want %v", got, cases[2].want)
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
