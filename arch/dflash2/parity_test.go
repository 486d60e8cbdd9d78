package dflash2

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/sample"
)

// Parity with z-lab's DFlash2DraftModel (dflash/model.py at 07ebd93) on the
// dflash2-tiny fixture: 2 sliding non-causal layers (window 16) with dynamic
// convolutions (Kc 2, groups of 16 channels), and a selector of rank 8 over
// the top 4 candidates, for the qwen35-tiny target, float32 on the CPU. The
// README suggests 1e-3 absolute for hidden states, logits and scores (the
// float32/float64 gap is 2.3e-5), ids exact (every recorded choice and every
// top-K boundary has a gap of at least 0.006).
const tol = 1e-3

type pair struct {
	f      *dflashtest.Fixture
	target model.DraftTarget
	draft  *Draft
}

func loadPair(t *mlxtest.T) *pair {
	f := dflashtest.Load(t, "dflash2-tiny")
	target := dflashtest.Target(t)
	return &pair{f: f, target: target, draft: f.Draft(t, target).(*Draft)}
}

// propose writes context rows x (or nil) at offset and the block [anchor,
// mask × n] in one forward and returns the n predicted rows [1, n, H] (the
// block's rows after the anchor) and their logits.
func (p *pair) propose(caches []cache.Cache, x *mlx.Array, offset int, anchor int32, n int) (rows, logits *mlx.Array) {
	h := p.forward(caches, x, offset, anchor, n)
	rows = mlx.SliceAxis(h, 1, 1, n+1)
	return rows, p.draft.Unembed(rows)
}

// forward returns the hidden states of all n+1 block rows.
func (p *pair) forward(caches []cache.Cache, x *mlx.Array, offset int, anchor int32, n int) *mlx.Array {
	_, mask := p.draft.BlockParams()
	ids := []int32{anchor}
	for range n {
		ids = append(ids, mask)
	}
	h, _ := p.draft.Forward(&model.Batch{
		InputIDs:     mlx.FromInt32s(ids, 1, n+1),
		SeqOffsets:   []int{offset},
		SeqQueryLens: []int{n + 1},
		Hidden:       x,
	}, nil, caches)
	return h
}

func check(t *mlxtest.T, what string, d float64) {
	t.Helper()
	if d > tol {
		t.Errorf("%s: max abs error %.3g > %g", what, d, tol)
	} else {
		t.Logf("%s: max abs error %.3g", what, d)
	}
}

func TestParitySingleBlock(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t)
		f := p.f
		prompt := f.Ref.PromptIDs
		x := dflashtest.Features(p.target, prompt)
		check(t, "context_features (target taps)", dflashtest.MaxAbs(t, x, f.RefTensor(t, "context_features")))

		n := p.draft.cfg.BlockSize - 1
		anchor := f.Ref.BlockIDs[0]
		h := p.forward(p.draft.NewCaches(), x, 0, anchor, n)
		check(t, "block_hidden", dflashtest.MaxAbs(t, h, f.RefTensor(t, "block_hidden")))
		rows := mlx.SliceAxis(h, 1, 1, n+1)
		logits := p.draft.Unembed(rows)
		check(t, "draft_logits", dflashtest.MaxAbs(t, logits, f.RefTensor(t, "draft_logits")))
		if got := t.Int32s(mlx.Argmax(logits, -1, false)); !slices.Equal(got, f.Ref.DraftArgmaxTokens) {
			t.Errorf("plain argmax of the draft logits %v, want %v", got, f.Ref.DraftArgmaxTokens)
		}

		a := mlx.FromInt32s([]int32{anchor}, 1)
		lat := p.draft.Lattice(rows, logits, a)
		wantIDs := f.RefInts(t, "selector_candidates")
		gotIDs := t.Int32s(lat.IDs)
		if !slices.Equal(gotIDs, wantIDs) {
			t.Errorf("candidates %v, want %v (sorted by descending logit)", gotIDs, wantIDs)
		}
		for r := range n { // as sets too, since only the set decides the path
			g, w := slices.Clone(gotIDs[r*4:r*4+4]), slices.Clone(wantIDs[r*4:r*4+4])
			slices.Sort(g)
			slices.Sort(w)
			if !slices.Equal(g, w) {
				t.Errorf("row %d: candidate set %v, want %v", r, g, w)
			}
		}
		check(t, "selector_unary", dflashtest.MaxAbs(t, lat.Unary, f.RefTensor(t, "selector_unary")))
		check(t, "selector_hidden_projection", dflashtest.MaxAbs(t, lat.Projection, f.RefTensor(t, "selector_hidden_projection")))
		if got, want := t.Int32s(lat.Predecessors), f.RefInts(t, "selector_predecessor_ids"); !slices.Equal(got, want) {
			t.Errorf("predecessor ids %v, want %v", got, want)
		}
		check(t, "selector_lattice", dflashtest.MaxAbs(t, lat.Scores, f.RefTensor(t, "selector_lattice")))

		// The greedy walk through Select with the sampler's own callback.
		choose := sample.New(sample.Options{}, nil).Choose
		tokens, ids, probs := p.draft.Select(rows, logits, a, choose)
		t.Shape(tokens, 1, n)
		t.Shape(ids, 1, n, 4)
		t.Shape(probs, 1, n, 4)
		if got, want := t.Int32s(tokens), f.RefInts(t, "selector_path_tokens"); !slices.Equal(got, want) {
			t.Errorf("greedy path %v, want %v", got, want)
		}
		if got := t.Int32s(ids); !slices.Equal(got, wantIDs) {
			t.Errorf("Select's candidates %v, want %v", got, wantIDs)
		}
		pr := t.Float32s(probs)
		for p, j := range f.RefInts(t, "selector_path_index") {
			for c := range 4 {
				want := float32(0)
				if int32(c) == j {
					want = 1
				}
				if pr[p*4+c] != want {
					t.Errorf("position %d: greedy probs %v, want one-hot at %d", p, pr[p*4:p*4+4], j)
					break
				}
			}
		}
		if got, want := t.Int32s(tokens), f.RefInts(t, "draft_tokens"); !slices.Equal(got, want) {
			t.Errorf("draft tokens %v, want %v", got, want)
		}
	})
}

// The scripted loop grows the context by several rows per round; every
// round's selector path must equal the reference's proposal (see the DFlash
// test of the same name for the protocol).
func TestScriptedLoopProposals(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t)
		seq := p.f.Sequence()
		x := dflashtest.Features(p.target, seq[:len(seq)-1])
		caches := p.draft.NewCaches()
		choose := sample.New(sample.Options{}, nil).Choose
		ctxOffset, outstanding := 0, false
		for r, round := range p.f.Ref.Scripted.Rounds {
			if outstanding {
				cache.Commit(caches, 0, 1, ctxOffset)
			}
			offset := ctxOffset
			ctxOffset = round.Start
			cache.Schedule(caches, ctxOffset, 1)
			outstanding = true
			n := round.VerifySize - 1
			rows, logits := p.propose(caches, mlx.SliceAxis(x, 1, offset, ctxOffset), offset, round.BlockIDs[0], n)
			tokens, _, _ := p.draft.Select(rows, logits, mlx.FromInt32s(round.BlockIDs[:1], 1), choose)
			if got := t.Int32s(tokens); !slices.Equal(got, round.DraftProposal) {
				t.Errorf("round %d (start %d, %d drafts): path %v, want %v", r, round.Start, n, got, round.DraftProposal)
			}
			if got := t.Int32s(mlx.Argmax(logits, -1, false)); !slices.Equal(got, round.DraftNaiveArgmax) {
				t.Errorf("round %d: argmax %v, want %v", r, got, round.DraftNaiveArgmax)
			}
		}
		cache.Commit(caches, 0, 1, ctxOffset)
	})
}

// End to end with the speculation core running a selector session (fixed
// depth 7) on the fixture pair, greedy; see the DFlash test for how the
// rounds line up with the fixture's spec_loop.
func TestSpeculativeGreedyMatchesTarget(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t)
		f := p.f
		run := dflashtest.RunSpeculative(t, p.target, p.draft, true, f.Ref.PromptIDs, len(f.Ref.TargetGreedyIDs))
		if !slices.Equal(run.Tokens, f.Ref.TargetGreedyIDs) {
			t.Fatalf("speculative output %v\nwant the target's greedy %v", run.Tokens, f.Ref.TargetGreedyIDs)
		}
		if run.Stats.DepthPolicy != "fixed 7" {
			t.Errorf("depth policy %q, want a fixed 7", run.Stats.DepthPolicy)
		}
		loop := f.Ref.SpecLoop
		st := run.Stats
		if st.Accepted != 0 || st.DraftRounds != len(f.Ref.TargetGreedyIDs)-1 {
			t.Errorf("%d draft rounds accepted %d drafts; the fixture's acceptance lengths %v say none", st.DraftRounds, st.Accepted, loop.AcceptanceLengths)
		}
		compared := 0
		for r := 1; r < len(run.Proposals) && r-1 < len(loop.Rounds); r++ {
			got, want := run.Proposals[r], loop.Rounds[r-1]
			if got.Anchor != want.BlockIDs[0] || len(got.Tokens) != len(want.BlockIDs)-1 {
				continue
			}
			compared++
			if !slices.Equal(got.Tokens, want.BlockIDs[1:]) {
				t.Errorf("round %d drafted %v, fixture round %d %v", r, got.Tokens, r-1, want.BlockIDs[1:])
			}
		}
		t.Logf("%d rounds, %d compared with the fixture's drafts token for token", len(run.Proposals), compared)
		if compared < 20 {
			t.Errorf("only %d rounds were comparable", compared)
		}
	})
}

// A selector session drafting fewer than 7 tokens still runs the whole
// trained block (DFlash2's layers are all non-causal), so its path is the
// start of the fixture's full-block selector path in every round; with
// fewer rows the block attention would differ from the reference.
func TestShallowDepthRunsWholeBlock(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t)
		f := p.f
		if !p.draft.BidirectionalBlock() {
			t.Fatal("the fixture's draft is non-causal; BidirectionalBlock says otherwise")
		}
		for _, depth := range []int{1, 2, 3, 5} {
			run := dflashtest.RunSpeculativeAt(t, p.target, p.draft, true, f.Ref.PromptIDs, len(f.Ref.TargetGreedyIDs), depth)
			if !slices.Equal(run.Tokens, f.Ref.TargetGreedyIDs) {
				t.Fatalf("depth %d: speculative output %v\nwant the target's greedy %v", depth, run.Tokens, f.Ref.TargetGreedyIDs)
			}
			n := dflashtest.CheckShallowProposals(t, run, f, depth, func(r dflashtest.Round) []int32 { return r.BlockIDs[1:] })
			if n < 20 {
				t.Errorf("depth %d: only %d rounds were comparable", depth, n)
			}
		}
	})
}

// A DFlash2 draft whose manifest omits "selector" runs as a plain block
// draft (argmax of its logits); the output is still the target's.
func TestSpeculativeAsPlainBlockDraft(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t)
		f := p.f
		run := dflashtest.RunSpeculative(t, p.target, p.draft, false, f.Ref.PromptIDs, len(f.Ref.TargetGreedyIDs))
		if !slices.Equal(run.Tokens, f.Ref.TargetGreedyIDs) {
			t.Fatalf("speculative output %v\nwant the target's greedy %v", run.Tokens, f.Ref.TargetGreedyIDs)
		}
		// Its proposals are the plain argmax, which the fixture records for
		// every round too.
		for r := 1; r < len(run.Proposals) && r-1 < len(f.Ref.SpecLoop.Rounds); r++ {
			got, want := run.Proposals[r], f.Ref.SpecLoop.Rounds[r-1]
			if len(got.Tokens) == len(want.DraftNaiveArgmax) && !slices.Equal(got.Tokens, want.DraftNaiveArgmax) {
				t.Errorf("round %d drafted %v, fixture's argmax %v", r, got.Tokens, want.DraftNaiveArgmax)
			}
		}
	})
}
