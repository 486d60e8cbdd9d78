package speculation

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// bidirectionalDraft is the fake block draft declaring that its block rows
// attend both ways (model.BidirectionalBlock) — or, with both false, that
// its layers are all causal.
type bidirectionalDraft struct {
	*fakeBlockDraft
	both bool
}

func (d *bidirectionalDraft) BidirectionalBlock() bool { return d.both }

// A draft trained on whole bidirectional blocks gets the whole block
// [anchor, mask × (blockSize−1)] at every depth, and only the first n
// predictions are proposed; a causal one gets [anchor, mask × n]. Either
// way the block leaves the draft cache before the next context write.
func TestBidirectionalDraftRunsWholeBlock(t *testing.T) {
	for _, c := range []struct {
		name  string
		both  bool
		block []int32
	}{
		{"bidirectional", true, []int32{2, 6, 6, 6}},
		{"causal", false, []int32{2, 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				r := newRig(map[int32]int32{2: 3, 3: 4, 4: 5}, 4, false)
				r.drafter = NewBlockDrafter(&bidirectionalDraft{r.draft, c.both}, r.caches[:1], r.caches[1:], false)
				s := r.session(sample.Options{})
				s.Committed(ids(1), oneHot([]int32{1}), 0)
				cand := s.Propose(mlx.FromInt32s([]int32{2}, 1), 1)
				if cand == nil {
					t.Fatalf("Propose declined")
				}
				if got := ints(cand.Tokens); !slices.Equal(got, []int32{3}) {
					t.Fatalf("drafts %v, want [3] (one proposal at depth 1)", got)
				}
				if n := cand.Dist.Probs.Dim(0); n != 1 {
					t.Fatalf("proposal distribution has %d rows, want 1", n)
				}
				checkCalls(t, r.draft.calls, blockCall{offset: 0, ctx: []int32{1}, block: c.block})
				s.Committed(ids(2, 3), oneHot([]int32{2, 3}), 1)
				s.Settle()
				if got := streamOf(r.caches[1]); !slices.Equal(got, []int32{1, 2, 3}) {
					t.Fatalf("draft stream after settle %v, want [1 2 3]", got)
				}
			})
		})
	}
}
