package dflash

import (
	"fmt"
	"slices"
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
)

// Parity with z-lab's DFlashDraftModel (dflash/model.py at 07ebd93) on the
// dflash-tiny fixture: a 2-layer draft (layer 0 sliding causal with window 8,
// layer 1 full non-causal) for the qwen35-tiny target, float32 on the CPU.
// The reference ran in float64; its README measures 2.6e-5 between float32
// and float64 and suggests 1e-3 absolute for hidden states and logits, ids
// exact (every recorded argmax has a top-1/top-2 gap of at least 0.006).
const (
	hiddenTol = 1e-3
	logitTol  = 1e-3
	// splitTol bounds the difference between one context write and the same
	// rows written over several calls: the same float32 maths in another
	// grouping.
	splitTol = 1e-5
)

// pair is the fixture's target and draft, ready to run.
type pair struct {
	f      *dflashtest.Fixture
	target model.DraftTarget
	draft  *Draft
}

func loadPair(t *mlxtest.T, f *dflashtest.Fixture) *pair {
	target := dflashtest.Target(t)
	return &pair{f: f, target: target, draft: f.Draft(t, target).(*Draft)}
}

// block returns [anchor, mask × n] as [1, n+1].
func (p *pair) block(anchor int32, n int) *mlx.Array {
	ids := []int32{anchor}
	for range n {
		ids = append(ids, p.draft.cfg.MaskTokenID)
	}
	return mlx.FromInt32s(ids, 1, n+1)
}

// propose runs one proposal forward: pending context rows x (or nil) at
// slot offset, then the block; it returns the block's hidden states.
func (p *pair) propose(caches []cache.Cache, x *mlx.Array, offset int, block *mlx.Array) *mlx.Array {
	h, aux := p.draft.Forward(&model.Batch{
		InputIDs:     block,
		SeqOffsets:   []int{offset},
		SeqQueryLens: []int{block.Dim(1)},
		Hidden:       x,
	}, nil, caches)
	if h != aux {
		panic("Forward must return its hidden states as aux")
	}
	return h
}

func check(t *mlxtest.T, what string, d, tol float64) {
	t.Helper()
	if d > tol {
		t.Errorf("%s: max abs error %.3g > %g", what, d, tol)
	} else {
		t.Logf("%s: max abs error %.3g", what, d)
	}
}

func TestParitySingleBlock(t *testing.T) {
	f := dflashtest.Load(t, "dflash-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t, f)
		prompt := f.Ref.PromptIDs

		// Context: the real target's taps [0, 2] for the prompt.
		x := dflashtest.Features(p.target, prompt)
		t.Shape(x, 1, len(prompt), 2*64)
		check(t, "context_features (target taps)", dflashtest.MaxAbs(t, x, f.RefTensor(t, "context_features")), hiddenTol)
		check(t, "context_projected", dflashtest.MaxAbs(t, p.draft.projectContext(x), f.RefTensor(t, "context_projected")), hiddenTol)

		var layers []*mlx.Array
		p.draft.trace = func(_ int, h *mlx.Array) { layers = append(layers, h) }
		defer func() { p.draft.trace = nil }()
		caches := p.draft.NewCaches()
		blockIDs := f.RefInts(t, "block_ids")
		if !slices.Equal(blockIDs, f.Ref.BlockIDs) || f.Ref.BlockPositions[0] != len(prompt) {
			t.Fatalf("fixture block %v at %v is not the documented one", blockIDs, f.Ref.BlockPositions)
		}
		n := p.draft.cfg.BlockSize - 1 // full block, as z-lab runs it
		hidden := p.propose(caches, x, 0, p.block(blockIDs[0], n))
		t.Shape(hidden, 1, n+1, 64)

		refLayers := f.RefTensor(t, "layer_outputs")
		for l, h := range layers {
			check(t, fmt.Sprintf("layer_outputs[%d]", l), dflashtest.MaxAbs(t, h, mlx.SliceAxis(refLayers, 0, l, l+1)), hiddenTol)
		}
		check(t, "block_hidden", dflashtest.MaxAbs(t, hidden, f.RefTensor(t, "block_hidden")), hiddenTol)
		logits := p.draft.Unembed(mlx.SliceAxis(hidden, 1, 1, n+1))
		check(t, "draft_logits", dflashtest.MaxAbs(t, logits, f.RefTensor(t, "draft_logits")), logitTol)
		got := t.Int32s(mlx.Argmax(logits, -1, false))
		if want := f.RefInts(t, "draft_tokens"); !slices.Equal(got, want) {
			t.Errorf("draft tokens %v, want %v", got, want)
		}
		for _, c := range caches {
			if c.Offset() != len(prompt)+n+1 {
				t.Errorf("a cache sits at %d after the block, want %d", c.Offset(), len(prompt)+n+1)
			}
		}

		// The same block from the reference's own features isolates the
		// draft's error from the target's.
		hidden2 := p.propose(p.draft.NewCaches(), mlx.Reshape(f.RefTensor(t, "context_features"), 1, len(prompt), 128), 0, p.block(blockIDs[0], n))
		check(t, "block_hidden from the reference's features", dflashtest.MaxAbs(t, hidden2, f.RefTensor(t, "block_hidden")), hiddenTol)
	})
}

// Context in one call equals the same rows written over several calls:
// context-only calls of uneven sizes, then the rest with the block, or the
// block alone.
func TestContextSplitEqualsOneCall(t *testing.T) {
	f := dflashtest.Load(t, "dflash-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t, f)
		T := len(f.Ref.PromptIDs)
		x := dflashtest.Features(p.target, f.Ref.PromptIDs)
		block := p.block(f.Ref.BlockIDs[0], p.draft.cfg.BlockSize-1)
		one := p.propose(p.draft.NewCaches(), x, 0, block)

		for _, tc := range []struct {
			name   string
			splits []int // context-only calls end at these rows; the rest goes with the block
		}{
			{"three context calls then the rest with the block", []int{5, 13, 20}},
			{"one row at a time, block alone", seq(1, T)},
			{"all context first, block alone", []int{T}},
			{"window-sized pieces", []int{8, 16}},
		} {
			caches := p.draft.NewCaches()
			at := 0
			for _, end := range tc.splits {
				h, aux := p.draft.Forward(&model.Batch{SeqOffsets: []int{at}, Hidden: mlx.SliceAxis(x, 1, at, end)}, nil, caches)
				if h != nil || aux != nil {
					t.Fatalf("%s: a context-only call returned hidden states", tc.name)
				}
				at = end
			}
			var rest *mlx.Array
			if at < T {
				rest = mlx.SliceAxis(x, 1, at, T)
			}
			got := p.propose(caches, rest, at, block)
			check(t, tc.name, dflashtest.MaxAbs(t, got, one), splitTol)
		}
	})
}

// seq returns from, from+1, …, to.
func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// The fixture's scripted loop grows the context by several rows per round
// (acceptance lengths 3, 8, 1, 5, 2, 8, 4). Run the draft as the speculation
// core does: each proposal writes the new context rows and the block in one
// forward, with a rewind point at the context's end; the next write rewinds
// the block first. With a window of 8 the sliding layer's cache wraps, so
// the rewinds go through its snapshots. Every round's drafts must equal the
// reference's.
func TestScriptedLoopProposals(t *testing.T) {
	f := dflashtest.Load(t, "dflash-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t, f)
		seqIDs := f.Sequence()
		x := dflashtest.Features(p.target, seqIDs[:len(seqIDs)-1])
		caches := p.draft.NewCaches()
		ctxOffset, outstanding := 0, false
		for r, round := range f.Ref.Scripted.Rounds {
			if outstanding {
				cache.Commit(caches, 0, 1, ctxOffset)
			}
			if round.BlockIDs[0] != seqIDs[round.Start] {
				t.Fatalf("round %d: anchor %d is not the token at slot %d", r, round.BlockIDs[0], round.Start)
			}
			offset := ctxOffset
			ctxOffset = round.Start
			cache.Schedule(caches, ctxOffset, 1)
			outstanding = true
			n := round.VerifySize - 1
			hidden := p.propose(caches, mlx.SliceAxis(x, 1, offset, ctxOffset), offset, p.block(round.BlockIDs[0], n))
			got := t.Int32s(mlx.Argmax(p.draft.Unembed(mlx.SliceAxis(hidden, 1, 1, n+1)), -1, false))
			if !slices.Equal(got, round.DraftProposal) {
				t.Errorf("round %d (start %d, %d context rows, %d drafts): proposal %v, want %v", r, round.Start, ctxOffset-offset, n, got, round.DraftProposal)
			}
		}
		cache.Commit(caches, 0, 1, ctxOffset)
		for l, c := range caches {
			if c.Offset() != ctxOffset {
				t.Errorf("layer %d cache at %d after the last rewind, want %d", l, c.Offset(), ctxOffset)
			}
		}
	})
}
