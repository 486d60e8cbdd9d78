package dflash

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// End to end with the speculation core on the fixture pair, greedy, at a
// fixed depth of 7: the output is the target's own greedy continuation, and
// the rounds match the fixture's spec_loop where the loops are comparable.
//
// The core holds the last prompt token back as the decode seed, so its first
// round anchors on prompt[23] at slot 23, a round the fixture's loop does
// not have. Every later round r anchors on greedy[r−1] at slot 23+r with the
// context of slots 0 … 22+r, exactly the fixture's round r−1 as long as each
// round accepts nothing (the fixture's acceptance lengths are all 1). The
// fixture drafts a full block every round; the core drafts min(7,
// remaining−1), so only the rounds that drafted 7 are compared token for
// token.
func TestSpeculativeGreedyMatchesTarget(t *testing.T) {
	f := dflashtest.Load(t, "dflash-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t, f)
		budget := len(f.Ref.TargetGreedyIDs)
		run := dflashtest.RunSpeculative(t, p.target, p.draft, false, f.Ref.PromptIDs, budget)
		if !slices.Equal(run.Tokens, f.Ref.TargetGreedyIDs) {
			t.Fatalf("speculative output %v\nwant the target's greedy %v", run.Tokens, f.Ref.TargetGreedyIDs)
		}
		if run.Stats.DepthPolicy != "pinned 7" {
			t.Errorf("depth policy %q, want pinned 7", run.Stats.DepthPolicy)
		}
		checkAgainstSpecLoop(t, f, run)
	})
}

// checkAgainstSpecLoop compares a speculative run with the fixture's
// spec_loop (every acceptance length 1).
func checkAgainstSpecLoop(t *mlxtest.T, f *dflashtest.Fixture, run *dflashtest.SpecRun) {
	t.Helper()
	loop := f.Ref.SpecLoop
	for i, a := range loop.AcceptanceLengths {
		if a != 1 {
			t.Fatalf("fixture round %d has acceptance length %d; this comparison assumes 1 throughout", i, a)
		}
	}
	st := run.Stats
	// Each round emits one token; the last one cannot draft (budget).
	if st.Accepted != 0 || st.DraftRounds != len(f.Ref.TargetGreedyIDs)-1 {
		t.Errorf("%d draft rounds accepted %d drafts; the fixture's acceptance lengths say %d rounds accepting none",
			st.DraftRounds, st.Accepted, len(f.Ref.TargetGreedyIDs)-1)
	}
	compared := 0
	for r := 1; r < len(run.Proposals) && r-1 < len(loop.Rounds); r++ {
		got, want := run.Proposals[r], loop.Rounds[r-1]
		if got.Anchor != want.BlockIDs[0] {
			t.Errorf("round %d anchored on %d, fixture round %d on %d", r, got.Anchor, r-1, want.BlockIDs[0])
			continue
		}
		if len(got.Tokens) != len(want.BlockIDs)-1 {
			continue // a shorter block than the fixture's full one
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
}

// A non-causal DFlash draft drafting fewer than blockSize−1 tokens still
// runs the whole trained block, so its first proposals are exactly those of
// the fixture's full-block rounds (z-lab's reference drafts whole blocks).
// With only 1+depth rows the non-causal last layer would see a different
// block and the proposals would differ from the reference.
func TestShallowDepthRunsWholeBlock(t *testing.T) {
	f := dflashtest.Load(t, "dflash-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t, f)
		if !p.draft.BidirectionalBlock() {
			t.Fatal("the fixture's draft has a non-causal full layer; BidirectionalBlock says it has none")
		}
		budget := len(f.Ref.TargetGreedyIDs)
		for _, depth := range []int{1, 2, 3, 5} {
			run := dflashtest.RunSpeculativeAt(t, p.target, p.draft, false, f.Ref.PromptIDs, budget, depth)
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
