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

// Put ends the write begun by SnapshotSplits. conv is the convolution tail
// at the end of the write and delta the delta state at each boundary: the
// interior splits in order, then the end. window, which a write with
// interior splits must pass (nil otherwise), holds the write's
// pre-convolution rows [1, ConvRows+L, ConvDim]: the tail before the write,
// then the L new rows, so that the tail at interior boundary b is its rows
// b … b+ConvRows−1. Interior states become the snapshots at their offsets,
// their tails sliced from window only if one is restored (a verification
// restores at most one, and each slice would be a graph node); conv and the
// last delta become the live state; the offset advances by L and the new
// offset is captured if scheduled. Put panics unless delta has
// len(splits)+1 entries and the live state and window have this cache's
// shapes (an interior delta state is checked when it is restored). The cache
// pins the arrays it keeps: the caller may sweep but must not Free them.
func (c *Recurrent) Put(conv, window *mlx.Array, delta []*mlx.Array) {
	if c.pending < 0 {
		panic("cache: Recurrent.Put without SnapshotSplits: call SnapshotSplits(L) first in the same forward")
	}
	if len(delta) != len(c.splits)+1 {
		panic(fmt.Sprintf("cache: Recurrent.Put got %d delta states for splits %v: want %d (one per split, then the end state)",
			len(delta), c.splits, len(c.splits)+1))
	}
	last := len(c.splits)
	c.checkShapes("Put", conv, delta[last])
	if last > 0 {
		c.checkWindow(window, c.pending)
	}
	start := c.offset
	for j, split := range c.splits {
		for _, i := range c.sched.due(start+split, start+split) {
			c.sched.snaps[i] = c.windowSnapshot(start+split, window, split, delta[j])
		}
	}
	c.ensure()
	c.conv = replace(c.conv, conv)
	c.delta = replace(c.delta, delta[last])
	c.offset = start + c.pending
	c.pending, c.splits = -1, nil
	c.captureDue(c.offset)
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
	conv := rs.conv
	if conv == nil {
		conv = mlx.SliceAxis(rs.window, 1, rs.row, rs.row+c.shape.ConvRows)
		c.checkShapes("Restore", conv, rs.delta)
	}
	c.ensure()
	c.conv = replace(c.conv, conv)
	c.delta = replace(c.delta, rs.delta)
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
// conv, or, for a state inside a write, that write's window with the tail at
// rows row … row+ConvRows−1 (sliced when restored).
type recSnapshot struct {
	cache       *Recurrent
	offset      int
	conv, delta *mlx.Array
	window      *mlx.Array
	row         int
	closed      bool
}

// snapshot captures a state of c (a pin on its arrays, which are immutable).
func (c *Recurrent) snapshot(offset int, conv, delta *mlx.Array) *recSnapshot {
	mlx.Pin(conv, delta)
	return &recSnapshot{cache: c, offset: offset, conv: conv, delta: delta}
}

// windowSnapshot captures the state at row of a write's window.
func (c *Recurrent) windowSnapshot(offset int, window *mlx.Array, row int, delta *mlx.Array) *recSnapshot {
	mlx.Pin(window, delta)
	return &recSnapshot{cache: c, offset: offset, delta: delta, window: window, row: row}
}

func (s *recSnapshot) Offset() int { return s.offset }

// Size is the bytes of the captured state.
func (s *recSnapshot) Size() int64 {
	if s.window == nil {
		return nbytes(s.conv, s.delta)
	}
	// The tail it restores: the window is its write's, shared by every
	// state taken inside that write (and a tail sliced from it shares its
	// storage all the same).
	sh := s.cache.shape
	return int64(sh.ConvRows*sh.ConvDim*sh.ConvDType.Size()) + nbytes(s.delta)
}

func (s *recSnapshot) Close() {
	if s.closed {
		return
	}
	s.closed = true
	mlx.Unpin(s.conv, s.window, s.delta) // one of conv and window is nil
	s.conv, s.delta, s.window = nil, nil, nil
}
