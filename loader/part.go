package loader

import (
	"fmt"
	"sync"

	"github.com/specula-dev/specula/mlx"
)

// Parts of tensors (tensor parallelism, spec/distributed.md): a rank of a
// sharded model keeps some rows or columns of most weights. Reading each
// whole tensor and cutting it would make every rank read, and briefly hold,
// the whole model; Part reads only the kept bytes. A tensor is stored
// row-major, so the entries at a span of one axis are, for every index of
// the axes before it, one run of contiguous bytes: a span of rows is one
// run, a span of columns one run per row. Each part is a lazy array read
// through MLX's own Load primitive (mlx.TensorFile), like Arrays's.

// Span is a half-open range [Start, Stop) of indices along one axis of a
// tensor: rows, columns or heads.
type Span struct{ Start, Stop int }

// Len is the number of indices in the span.
func (s Span) Len() int { return s.Stop - s.Start }

// Scale returns the span with both ends multiplied by k: the rows of heads
// k rows wide, say.
func (s Span) Scale(k int) Span { return Span{s.Start * k, s.Stop * k} }

// Shift returns the span moved by off.
func (s Span) Shift(off int) Span { return Span{s.Start + off, s.Stop + off} }

// Part returns a lazy array of the entries of the tensor name at spans
// along axis (negative counts from the last), concatenated in order: the
// tensor's shape with that axis as long as the spans together. When it is
// evaluated, only those entries' bytes are read from the tensor's shard.
// The dtype is the stored one. It runs on the MLX worker; the checkpoint
// must be open until the part is made (not until it is read).
func (c *Checkpoint) Part(name string, axis int, spans ...Span) (*mlx.Array, error) {
	t, ok := c.Tensor(name)
	if !ok {
		return nil, &Error{File: c.Dir, Tensor: name, Kind: ErrTensorNotFound, Detail: "no such tensor in the checkpoint"}
	}
	where, shape, err := partLayout(t, axis, spans)
	if err != nil {
		return nil, &Error{File: t.Path, Tensor: name, Kind: ErrPart, Detail: err.Error()}
	}
	f, err := c.partFile(t.Path)
	if err != nil {
		return nil, err
	}
	return f.LoadPart(t.DType.String(), shape, where)
}

// PartOf is Part for a tensor given as the lazy array that Arrays or
// ArraysAs made for it (cast alike), while its checkpoint is open. ok is
// false for any other array (built by an op or from host memory): the
// caller then cuts that array with ops.
func PartOf(a *mlx.Array, axis int, spans ...Span) (part *mlx.Array, ok bool, err error) {
	v, found := origins.Load(a)
	if !found {
		return nil, false, nil
	}
	o := v.(origin)
	part, err = o.ck.Part(o.name, axis, spans...)
	if err != nil {
		return nil, true, err
	}
	if o.cast != nil && part.DType().IsFloat() && part.DType() != *o.cast {
		part = mlx.AsType(part, *o.cast)
	}
	return part, true, nil
}

// origins maps each lazy array Arrays and ArraysAs made to its tensor, for
// PartOf, until its checkpoint is closed. Arrays are compared by identity:
// an op's result is another array, which PartOf does not know.
var origins sync.Map // *mlx.Array → origin

type origin struct {
	ck   *Checkpoint
	name string
	cast *mlx.DType // the dtype ArraysAs cast floats to; nil for Arrays
}

// remember records the arrays c made, for PartOf.
func (c *Checkpoint) remember(arrays map[string]*mlx.Array, cast *mlx.DType) {
	c.partMu.Lock()
	defer c.partMu.Unlock()
	for name, a := range arrays {
		origins.Store(a, origin{ck: c, name: name, cast: cast})
		c.made = append(c.made, a)
	}
}

// closeParts forgets c's arrays and releases the files Part opened (a part
// already made keeps its file open until it is read or freed).
func (c *Checkpoint) closeParts() {
	c.partMu.Lock()
	defer c.partMu.Unlock()
	for _, a := range c.made {
		origins.Delete(a)
	}
	c.made = nil
	for _, f := range c.partFiles {
		f.Close()
	}
	c.partFiles = nil
}

// partFile returns the shard at path opened for parts, opening it once.
func (c *Checkpoint) partFile(path string) (*mlx.TensorFile, error) {
	c.partMu.Lock()
	defer c.partMu.Unlock()
	if f, ok := c.partFiles[path]; ok {
		return f, nil
	}
	f, err := mlx.OpenTensorFile(path)
	if err != nil {
		return nil, err
	}
	if c.partFiles == nil {
		c.partFiles = map[string]*mlx.TensorFile{}
	}
	c.partFiles[path] = f
	return f, nil
}

// partLayout returns where the entries at spans along axis of t lie in its
// file, and the part's shape. The spans must be non-empty, in range and
// cut at whole bytes (sub-byte dtypes).
func partLayout(t TensorInfo, axis int, spans []Span) (mlx.FilePart, []int, error) {
	n := len(t.Shape)
	if axis < -n || axis >= n {
		return mlx.FilePart{}, nil, fmt.Errorf("axis %d of a %d-dimensional tensor %v", axis, n, t.Shape)
	}
	if axis < 0 {
		axis += n
	}
	if len(spans) == 0 {
		return mlx.FilePart{}, nil, fmt.Errorf("no span of axis %d to read", axis)
	}
	dim := int64(t.Shape[axis])
	outer, inner := int64(1), int64(t.DType.Bits())
	for _, d := range t.Shape[:axis] {
		outer *= int64(d)
	}
	for _, d := range t.Shape[axis+1:] {
		inner *= int64(d)
	}
	if inner%8 != 0 {
		return mlx.FilePart{}, nil, fmt.Errorf("an index of axis %d of %s %v is %d bits, not whole bytes: this part cannot be read on its own", axis, t.DType, t.Shape, inner)
	}
	inner /= 8 // bytes per index of the axis
	shape := make([]int, n)
	for i, d := range t.Shape {
		shape[i] = int(d)
	}
	shape[axis] = 0
	var ranges []mlx.ByteRange
	for _, s := range spans {
		if s.Start < 0 || s.Stop <= s.Start || int64(s.Stop) > dim {
			return mlx.FilePart{}, nil, fmt.Errorf("span %d … %d of axis %d (of length %d) is empty or out of range", s.Start, s.Stop-1, axis, dim)
		}
		shape[axis] += s.Len()
		r := mlx.ByteRange{Start: int64(s.Start) * inner, Len: int64(s.Len()) * inner}
		// Spans that meet are one read.
		if k := len(ranges) - 1; k >= 0 && ranges[k].Start+ranges[k].Len == r.Start {
			ranges[k].Len += r.Len
			continue
		}
		ranges = append(ranges, r)
	}
	stride := dim * inner
	if len(ranges) == 1 && ranges[0].Len == stride {
		// The whole axis: every block follows the last, one run of bytes.
		outer, ranges[0].Len = 1, outer*stride
	}
	return mlx.FilePart{Offset: t.Offset, Blocks: outer, Stride: stride, Ranges: ranges}, shape, nil
}
