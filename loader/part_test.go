package loader

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

// partCase is a part to read: spans of an axis of one tensor of the
// partCheckpoint.
type partCase struct {
	name   string
	tensor string
	axis   int
	spans  []Span
}

var partCases = []partCase{
	{"rows", "w", 0, []Span{{1, 3}, {4, 6}}},
	{"meeting rows", "w", 0, []Span{{1, 3}, {3, 5}}},
	{"all rows", "w", 0, []Span{{0, 6}}},
	{"columns", "w", 1, []Span{{2, 7}}},
	{"two column ranges", "w", -1, []Span{{0, 2}, {8, 10}}},
	{"all columns", "w", 1, []Span{{0, 10}}},
	{"bf16 experts' rows", "e", 1, []Span{{1, 3}}},
	{"bf16 experts' columns", "e", 2, []Span{{4, 8}}},
	{"bf16 one expert", "e", 0, []Span{{2, 3}}},
	{"packed words", "q", 1, []Span{{3, 6}}},
}

// partCheckpoint writes a checkpoint of three tensors whose entries are all
// different and finite: w float32 [6, 10], e bfloat16 [3, 4, 8] (stacked
// experts), q uint32 [4, 6] (packed quantized words).
func partCheckpoint(t *testing.T) string {
	dir := t.TempDir()
	var w, e, q []byte
	for i := range 60 {
		w = binary.LittleEndian.AppendUint32(w, math.Float32bits(float32(i)+0.5))
	}
	for i := range 96 { // bfloat16 holds integers up to 256 exactly
		e = binary.LittleEndian.AppendUint16(e, uint16(math.Float32bits(float32(i+1))>>16))
	}
	for i := range 24 {
		q = binary.LittleEndian.AppendUint32(q, uint32(1000+i))
	}
	writeST(t, dir, SingleFileName, []Tensor{
		{Name: "w", DType: F32, Shape: []uint64{6, 10}, Data: w},
		{Name: "e", DType: BF16, Shape: []uint64{3, 4, 8}, Data: e},
		{Name: "q", DType: U32, Shape: []uint64{4, 6}, Data: q},
	}, nil)
	return dir
}

// spanIndices lists the indices of spans, in order.
func spanIndices(spans []Span) []int32 {
	var idx []int32
	for _, s := range spans {
		for i := s.Start; i < s.Stop; i++ {
			idx = append(idx, int32(i))
		}
	}
	return idx
}

// wholeCut is the reference: the whole tensor read and its entries at the
// spans taken with an op.
func wholeCut(t *mlxtest.T, whole *mlx.Array, axis int, spans []Span) []float32 {
	idx := spanIndices(spans)
	return t.Float32s(mlx.AsType(mlx.Take(whole, mlx.FromInt32s(idx, len(idx)), axis), mlx.Float32))
}

// Part and PartOf read the same entries as cutting the whole tensor, for
// rows, columns and ranges of the middle axis of a 3-D tensor, in float32,
// bfloat16 (and cast by ArraysAs) and uint32.
func TestPartEqualsCutOfWholeTensor(t *testing.T) {
	dir := partCheckpoint(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		ck, err := OpenCheckpoint(dir)
		t.NoErr(err)
		defer ck.Close()
		whole, err := ck.Arrays()
		t.NoErr(err)
		cast, err := ck.ArraysAs(mlx.Float32)
		t.NoErr(err)
		for _, c := range partCases {
			want := wholeCut(t, whole[c.tensor], c.axis, c.spans)
			part, err := ck.Part(c.tensor, c.axis, c.spans...)
			t.NoErr(err)
			if part.DType() != whole[c.tensor].DType() {
				t.Errorf("%s: Part dtype %s, want the stored %s", c.name, part.DType(), whole[c.tensor].DType())
			}
			if got := t.Float32s(mlx.AsType(part, mlx.Float32)); !slices.Equal(got, want) {
				t.Errorf("%s: Part %v, want %v", c.name, got, want)
			}
			of, ok, err := PartOf(cast[c.tensor], c.axis, c.spans...)
			t.NoErr(err)
			if !ok {
				t.Fatalf("%s: PartOf does not know ArraysAs's array", c.name)
			}
			if wantDT := cast[c.tensor].DType(); of.DType() != wantDT {
				t.Errorf("%s: PartOf of a cast array is %s, want %s", c.name, of.DType(), wantDT)
			}
			if got := t.Float32s(mlx.AsType(of, mlx.Float32)); !slices.Equal(got, want) {
				t.Errorf("%s: PartOf %v, want %v", c.name, got, want)
			}
		}
		// An array the checkpoint did not make is not PartOf's.
		if _, ok, _ := PartOf(mlx.AddScalar(whole["w"], 0), 0, Span{0, 1}); ok {
			t.Errorf("PartOf knows an op's result")
		}
		t.NoErr(ck.Close())
		if _, ok, _ := PartOf(whole["w"], 0, Span{0, 1}); ok {
			t.Errorf("PartOf still knows the arrays of a closed checkpoint")
		}
	})
}

// A part reads only its own bytes: in a copy of the checkpoint whose other
// bytes of the tensor are overwritten with 0xFF (NaN in float32 and
// bfloat16), the part still equals the clean tensor's cut. The bytes kept
// are found by walking every element's index, not by Part's arithmetic.
func TestPartReadsOnlyItsBytes(t *testing.T) {
	clean := partCheckpoint(t)
	raw, err := os.ReadFile(filepath.Join(clean, SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		ck, err := OpenCheckpoint(clean)
		t.NoErr(err)
		defer ck.Close()
		whole, err := ck.Arrays()
		t.NoErr(err)
		for _, c := range partCases {
			info, _ := ck.Tensor(c.tensor)
			poisoned := slices.Clone(raw)
			keep := keptElements(info.Shape, c.axis, c.spans)
			size := int(info.DType.Bits() / 8)
			for i, kept := range keep {
				if !kept {
					for b := range size {
						poisoned[int(info.Offset)+i*size+b] = 0xFF
					}
				}
			}
			dir := t.TempDir()
			writeFile(t, dir, SingleFileName, poisoned)
			pck, err := OpenCheckpoint(dir)
			t.NoErr(err)
			part, err := pck.Part(c.tensor, c.axis, c.spans...)
			t.NoErr(err)
			want := wholeCut(t, whole[c.tensor], c.axis, c.spans)
			if got := t.Float32s(mlx.AsType(part, mlx.Float32)); !slices.Equal(got, want) {
				t.Errorf("%s: the part of the poisoned copy is %v, want %v", c.name, got, want)
			}
			t.NoErr(pck.Close())
		}
	})
}

// keptElements marks, in row-major order, the elements of a tensor of shape
// whose index along axis lies in one of spans.
func keptElements(shape []uint64, axis int, spans []Span) []bool {
	if axis < 0 {
		axis += len(shape)
	}
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	out := make([]bool, n)
	for i := range out {
		// The index along axis of element i.
		rest := i
		for d := len(shape) - 1; d > axis; d-- {
			rest /= int(shape[d])
		}
		j := rest % int(shape[axis])
		for _, s := range spans {
			out[i] = out[i] || (j >= s.Start && j < s.Stop)
		}
	}
	return out
}

// Where parts lie, worked out by hand from the shapes.
func TestPartLayout(t *testing.T) {
	w := TensorInfo{Name: "w", DType: F32, Shape: []uint64{6, 10}, Offset: 1000}
	e := TensorInfo{Name: "e", DType: BF16, Shape: []uint64{3, 4, 8}, Offset: 64}
	cases := []struct {
		name  string
		t     TensorInfo
		axis  int
		spans []Span
		want  mlx.FilePart
		shape []int
	}{
		// A row is 40 bytes.
		{"rows", w, 0, []Span{{1, 3}, {4, 6}}, mlx.FilePart{Offset: 1000, Blocks: 1, Stride: 240, Ranges: []mlx.ByteRange{{Start: 40, Len: 80}, {Start: 160, Len: 80}}}, []int{4, 10}},
		{"meeting rows are one range", w, 0, []Span{{1, 3}, {3, 5}}, mlx.FilePart{Offset: 1000, Blocks: 1, Stride: 240, Ranges: []mlx.ByteRange{{Start: 40, Len: 160}}}, []int{4, 10}},
		{"columns: one block per row", w, 1, []Span{{2, 7}}, mlx.FilePart{Offset: 1000, Blocks: 6, Stride: 40, Ranges: []mlx.ByteRange{{Start: 8, Len: 20}}}, []int{6, 5}},
		{"all columns: the whole tensor", w, -1, []Span{{0, 10}}, mlx.FilePart{Offset: 1000, Blocks: 1, Stride: 40, Ranges: []mlx.ByteRange{{Start: 0, Len: 240}}}, []int{6, 10}},
		// An expert is 64 bytes, a row of one 16.
		{"experts' rows", e, 1, []Span{{1, 3}}, mlx.FilePart{Offset: 64, Blocks: 3, Stride: 64, Ranges: []mlx.ByteRange{{Start: 16, Len: 32}}}, []int{3, 2, 8}},
		{"experts' columns", e, 2, []Span{{4, 8}}, mlx.FilePart{Offset: 64, Blocks: 12, Stride: 16, Ranges: []mlx.ByteRange{{Start: 8, Len: 8}}}, []int{3, 4, 4}},
	}
	for _, c := range cases {
		got, shape, err := partLayout(c.t, c.axis, c.spans)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got.Offset != c.want.Offset || got.Blocks != c.want.Blocks || got.Stride != c.want.Stride || !slices.Equal(got.Ranges, c.want.Ranges) || !slices.Equal(shape, c.shape) {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, shape, c.want, c.shape)
		}
	}
}

// Parts that do not fit their tensor are refused, saying why.
func TestPartLayoutRefuses(t *testing.T) {
	w := TensorInfo{Name: "w", DType: F32, Shape: []uint64{6, 10}}
	f4 := TensorInfo{Name: "f", DType: F4, Shape: []uint64{2, 3}}
	cases := []struct {
		name  string
		t     TensorInfo
		axis  int
		spans []Span
		want  string
	}{
		{"axis", w, 2, []Span{{0, 1}}, "axis 2 of a 2-dimensional tensor"},
		{"negative axis", w, -3, []Span{{0, 1}}, "axis -3 of a 2-dimensional tensor"},
		{"no span", w, 0, nil, "no span"},
		{"empty span", w, 0, []Span{{3, 3}}, "empty or out of range"},
		{"span past the end", w, 1, []Span{{5, 11}}, "of length 10"},
		{"inside a byte", f4, 1, []Span{{0, 1}}, "4 bits, not whole bytes"},
	}
	for _, c := range cases {
		if _, _, err := partLayout(c.t, c.axis, c.spans); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// Part's errors name the file and the tensor.
func TestPartErrorsNameTheTensor(t *testing.T) {
	dir := partCheckpoint(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		ck, err := OpenCheckpoint(dir)
		t.NoErr(err)
		defer ck.Close()
		_, err = ck.Part("w", 0, Span{4, 9})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, SingleFileName)+`: tensor "w": span 4 … 8 of axis 0 (of length 6)`) {
			t.Errorf("Part out of range: %v", err)
		}
		if _, err := ck.Part("nope", 0, Span{0, 1}); err == nil || !strings.Contains(err.Error(), `tensor "nope"`) {
			t.Errorf("Part of a missing tensor: %v", err)
		}
	})
}

// In a sharded checkpoint each part is read from the shard the index names
// (two shards open for parts at once); the expected bytes are the
// tensors' own, read through Bytes.
func TestPartOfShardedCheckpoint(t *testing.T) {
	dir := shardedFolder(t, tinyIndex)
	mlxtest.Run(t, func(t *mlxtest.T) {
		ck, err := OpenCheckpoint(dir)
		t.NoErr(err)
		defer ck.Close()
		for _, c := range []struct {
			name     string
			axis     int
			span     Span
			from, to int // the bytes of the part in the tensor's
		}{
			{"model.embed.weight", 0, Span{1, 3}, 8, 24}, // [4, 2] float32: rows 1 and 2
			{"lm_head.weight", 0, Span{3, 4}, 24, 32},
			{"model.norm.weight", 0, Span{1, 2}, 4, 8},
		} {
			part, err := ck.Part(c.name, c.axis, c.span)
			t.NoErr(err)
			got, err := part.Bytes()
			t.NoErr(err)
			all, err := ck.Bytes(c.name)
			t.NoErr(err)
			if !slices.Equal(got, all[c.from:c.to]) {
				t.Errorf("%s: part bytes %x, want %x", c.name, got, all[c.from:c.to])
			}
		}
	})
}
