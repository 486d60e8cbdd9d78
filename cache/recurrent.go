package cache

import (
	"fmt"

	"github.com/specula-dev/specula/mlx"
)

// RecurrentShape sizes a recurrent cache.
type RecurrentShape struct {
	// ConvRows is the length of the convolution tail: the kernel size
	// minus one.
	ConvRows int
	// ConvDim is the number of convolution channels.
	ConvDim int
	// ConvDType is the dtype of the tail (the compute dtype).
	ConvDType mlx.DType
	// Heads, ValueDim and KeyDim size the float32 delta state
	// [1, Heads, ValueDim, KeyDim].
	Heads, ValueDim, KeyDim int
}

// Recurrent is the state of a gated delta-net layer (spec/speculation.md
// 3.4): the convolution tail [1, ConvRows, ConvDim] (the last pre-convolution
// rows) in the compute dtype and the delta state [1, Heads, ValueDim, KeyDim]
// in float32, both zeros until the first write.
//
// A recurrent state cannot be rewound, so rollback always installs a state
// captured at exactly that offset. Because the state is cumulative, a state
// strictly inside a batched write exists only inside the layer's forward:
// the layer asks SnapshotSplits which interior states it must produce and
// hands them over with Put.
//
// A write is SnapshotSplits(L) followed by Put. States are immutable MLX
// arrays, so a snapshot is just another pin on the arrays it captured.
type Recurrent struct {
	shape       RecurrentShape
	conv, delta *mlx.Array // pinned; nil until first use
	offset      int
	sched       schedule
	pending     int   // rows of the write begun by SnapshotSplits; -1 when none
	splits      []int // its interior boundaries
}

// NewRecurrent returns an empty recurrent cache of the given shape.
func NewRecurrent(shape RecurrentShape) *Recurrent {
	if shape.ConvRows < 0 || shape.ConvDim <= 0 || shape.Heads <= 0 || shape.ValueDim <= 0 || shape.KeyDim <= 0 {
		panic(fmt.Sprintf("cache: NewRecurrent(%+v): sizes must be positive", shape))
	}
	return &Recurrent{shape: shape, pending: -1}
}

// Shape returns the sizes the cache was made with.
func (c *Recurrent) Shape() RecurrentShape { return c.shape }

// Offset is the number of slots written.
func (c *Recurrent) Offset() int { return c.offset }

// ConvState returns the convolution tail [1, ConvRows, ConvDim] (zeros before
// the first write).
func (c *Recurrent) ConvState() *mlx.Array {
	c.ensure()
	return c.conv
}

// DeltaState returns the delta state [1, Heads, ValueDim, KeyDim] float32
// (zeros before the first write).
func (c *Recurrent) DeltaState() *mlx.Array {
	c.ensure()
	return c.delta
}

// State returns the convolution tail and the delta state.
func (c *Recurrent) State() []*mlx.Array {
	c.ensure()
	return []*mlx.Array{c.conv, c.delta}
}

func (c *Recurrent) ensure() {
	if c.conv != nil {
		return
	}
	s := c.shape
	c.conv = replace(nil, mlx.Zeros(s.ConvDType, 1, s.ConvRows, s.ConvDim))
	c.delta = replace(nil, mlx.Zeros(mlx.Float32, 1, s.Heads, s.ValueDim, s.KeyDim))
}

// PrepareSnapshots schedules captures at offsets (ascending, unique, each >=
// Offset). The current offset, if scheduled, is captured at once.
func (c *Recurrent) PrepareSnapshots(offsets []int) {
	c.sched.prepare("Recurrent", offsets, c.offset)
	c.captureDue(c.offset)
}

func (c *Recurrent) captureDue(offset int) {
	for _, i := range c.sched.due(offset, offset) {
		c.sched.snaps[i] = c.snapshot(offset, c.ConvState(), c.DeltaState())
	}
}

// SnapshotSplits begins a write of L rows and returns the scheduled offsets
// strictly inside (Offset, Offset+L), relative to the write's start
// (ascending, each in 1 … L−1). The layer must produce the state at each of
// these boundaries in the same forward and pass them to Put.
func (c *Recurrent) SnapshotSplits(L int) []int {
	if L <= 0 {
		panic(fmt.Sprintf("cache: Recurrent.SnapshotSplits(%d): a write needs at least one row", L))
	}
	var splits []int
	if c.sched.active {
		for _, o := range c.sched.offsets {
			if o > c.offset && o < c.offset+L {
				splits = append(splits, o-c.offset)
			}
		}
	}
	c.pending, c.splits = L, splits
	return splits
}

// RecurrentWrite is a layer's state through an L-row write begun by
// SnapshotSplits, what Put takes.
type RecurrentWrite struct {
	// Conv and Delta are the state after the write's last row.
	Conv, Delta *mlx.Array
	// ConvWindow, which a write with interior splits must give, holds the
	// write's pre-convolution rows [1, ConvRows+L, ConvDim] (the tail
	// before the write, then the L new rows): the tail at interior
	// boundary b is its rows b … b+ConvRows−1.
	ConvWindow *mlx.Array
	// The delta states at the interior splits: Deltas, one per split in
	// order, or DeltaRows [L, Heads, ValueDim, KeyDim], the state after
	// every row (at boundary b, row b−1), as a scan that emits them all
	// gives them.
	Deltas    []*mlx.Array
	DeltaRows *mlx.Array
}

// Put ends the write begun by SnapshotSplits with the layer's states w.
// Interior states become the snapshots at their offsets — as references
// into w's window and rows, each sliced only if that snapshot is restored
// (a verification restores at most one, and every slice made in the forward
// would be a graph node built and submitted for nothing); the end state
// becomes the live state; the offset advances by L and the new offset is
// captured if scheduled. Put panics unless w has what the splits need in
// this cache's shapes (an interior delta state is checked when restored).
// The cache pins the arrays it keeps: the caller may sweep but must not
// Free them.
func (c *Recurrent) Put(w RecurrentWrite) {
	if c.pending < 0 {
		panic("cache: Recurrent.Put without SnapshotSplits: call SnapshotSplits(L) first in the same forward")
	}
	c.checkShapes("Put", w.Conv, w.Delta)
	if len(c.splits) > 0 {
		c.checkWindow(w.ConvWindow, c.pending)
		c.checkInterior(w)
	}
	start := c.offset
	for j, split := range c.splits {
		for _, i := range c.sched.due(start+split, start+split) {
			s := &recSnapshot{cache: c, offset: start + split, window: w.ConvWindow, row: split}
			if w.DeltaRows != nil {
				s.deltaRows, s.deltaRow = w.DeltaRows, split-1
			} else {
				s.delta = w.Deltas[j]
			}
			mlx.Pin(s.window, s.delta, s.deltaRows)
			c.sched.snaps[i] = s
		}
	}
	c.ensure()
	c.conv = replace(c.conv, w.Conv)
	c.delta = replace(c.delta, w.Delta)
	c.offset = start + c.pending
	c.pending, c.splits = -1, nil
	c.captureDue(c.offset)
}

// checkInterior panics unless w gives a delta state for each interior split:
// one array per split, or rows [L, Heads, ValueDim, KeyDim] float32.
func (c *Recurrent) checkInterior(w RecurrentWrite) {
	s, L := c.shape, c.pending
	if w.DeltaRows == nil {
		if len(w.Deltas) != len(c.splits) {
			panic(fmt.Sprintf("cache: Recurrent.Put got %d interior delta states for splits %v: want %d (one per split) or the rows of every state",
				len(w.Deltas), c.splits, len(c.splits)))
		}
		return
	}
	rs := w.DeltaRows.Shape()
	if len(rs) != 4 || rs[0] != L || rs[1] != s.Heads || rs[2] != s.ValueDim || rs[3] != s.KeyDim || w.DeltaRows.DType() != mlx.Float32 {
		panic(fmt.Sprintf("cache: Recurrent.Put: got delta rows %v %s, want [%d %d %d %d] float32 (the state after each of the %d rows)",
			rs, w.DeltaRows.DType(), L, s.Heads, s.ValueDim, s.KeyDim, L))
	}
}

// TakeSnapshots returns one snapshot per scheduled offset (nil where the
// cache never reached it) and clears the schedule.
func (c *Recurrent) TakeSnapshots() []Snapshot { return c.sched.take() }

// Restore moves the cache to offset target. Without a snapshot only
// target == Offset succeeds (nothing to do): a recurrent state cannot be
// rewound. With a snapshot taken from this cache, target must equal its
// offset, and its state is installed.
func (c *Recurrent) Restore(s Snapshot, target int) bool {
	if s == nil {
		return target == c.offset
	}
	rs, ok := s.(*recSnapshot)
	if !ok || rs.cache != c || rs.closed || target != rs.offset {
		return false
	}
	conv, delta := rs.conv, rs.delta
	if conv == nil || delta == nil {
		if conv == nil {
			conv = mlx.SliceAxis(rs.window, 1, rs.row, rs.row+c.shape.ConvRows)
		}
		if delta == nil {
			delta = mlx.SliceAxis(rs.deltaRows, 0, rs.deltaRow, rs.deltaRow+1)
		}
		c.checkShapes("Restore", conv, delta)
	}
	c.ensure()
	c.conv = replace(c.conv, conv)
	c.delta = replace(c.delta, delta)
	c.offset = target
	c.pending, c.splits = -1, nil
	return true
}

// checkShapes panics unless conv and delta have this cache's shapes.
func (c *Recurrent) checkShapes(op string, conv, delta *mlx.Array) {
	s := c.shape
	cs, ds := conv.Shape(), delta.Shape()
	if len(cs) != 3 || cs[0] != 1 || cs[1] != s.ConvRows || cs[2] != s.ConvDim ||
		len(ds) != 4 || ds[0] != 1 || ds[1] != s.Heads || ds[2] != s.ValueDim || ds[3] != s.KeyDim || delta.DType() != mlx.Float32 {
		panic(fmt.Sprintf("cache: Recurrent.%s: got conv %v and delta %v %s, want conv [1 %d %d] and delta [1 %d %d %d] float32",
			op, cs, ds, delta.DType(), s.ConvRows, s.ConvDim, s.Heads, s.ValueDim, s.KeyDim))
	}
}

// checkWindow panics unless window holds the pre-convolution rows of an
// L-row write: [1, ConvRows+L, ConvDim] of the tail's dtype.
func (c *Recurrent) checkWindow(window *mlx.Array, L int) {
	s := c.shape
	if window == nil {
		panic(fmt.Sprintf("cache: Recurrent.Put: a write with interior splits %v needs its window of pre-convolution rows", c.splits))
	}
	ws := window.Shape()
	if len(ws) != 3 || ws[0] != 1 || ws[1] != s.ConvRows+L || ws[2] != s.ConvDim || window.DType() != s.ConvDType {
		panic(fmt.Sprintf("cache: Recurrent.Put: got window %v %s, want [1 %d %d] %s (the tail, then the %d rows written)",
			ws, window.DType(), s.ConvRows+L, s.ConvDim, s.ConvDType, L))
	}
}

// Free releases the state.
func (c *Recurrent) Free() {
	if c.conv != nil {
		mlx.Unpin(c.conv, c.delta)
	}
	c.conv, c.delta = nil, nil
	c.offset = 0
	c.pending, c.splits = -1, nil
}

// recSnapshot holds a pin on the arrays of one state of cache: its tail
// conv and delta state, or, for a state inside a write, references into that
// write's arrays — the tail at rows row … row+ConvRows−1 of window, the
// delta state delta itself or row deltaRow of deltaRows — sliced when
// restored.
type recSnapshot struct {
	cache       *Recurrent
	offset      int
	conv, delta *mlx.Array
	window      *mlx.Array
	row         int
	deltaRows   *mlx.Array
	deltaRow    int
	closed      bool
}

// snapshot captures a state of c (a pin on its arrays, which are immutable).
func (c *Recurrent) snapshot(offset int, conv, delta *mlx.Array) *recSnapshot {
	mlx.Pin(conv, delta)
	return &recSnapshot{cache: c, offset: offset, conv: conv, delta: delta}
}

func (s *recSnapshot) Offset() int { return s.offset }

// Size is the bytes of the captured state.
func (s *recSnapshot) Size() int64 {
	if s.window == nil {
		return nbytes(s.conv, s.delta)
	}
	// The state it restores: window and rows are its write's, shared by
	// every state taken inside that write (and a slice of them shares
	// their storage all the same).
	sh := s.cache.shape
	return int64(sh.ConvRows*sh.ConvDim*sh.ConvDType.Size() + sh.Heads*sh.ValueDim*sh.KeyDim*mlx.Float32.Size())
}

func (s *recSnapshot) Close() {
	if s.closed {
		return
	}
	s.closed = true
	mlx.Unpin(s.conv, s.window, s.delta, s.deltaRows) // nil ones are skipped
	s.conv, s.delta, s.window, s.deltaRows = nil, nil, nil, nil
}
