package qwen35moe_test

import (
	"fmt"
	"slices"
	"testing"

	_ "github.com/specula-dev/specula/arch/dflash" // DFlashDraftModel
	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	_ "github.com/specula-dev/specula/arch/dflash2" // DFlash2DraftModel
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/arch/qwen35moe"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
)

// DFlash and DFlash2 drafts run against the MoE target unchanged: the
// dflash-moe-tiny and dflash2-moe-tiny fixtures (random drafts that fit
// qwen35moe-tiny, with train/draft_model.py's outputs over transformers'
// target) give the reference's draft logits for the first block, and the
// speculation core, greedy at depth 7, emits the target's greedy
// continuation with every round drafting the reference loop's tokens.
func TestDraftsOverTheMoETarget(t *testing.T) {
	for _, c := range []struct {
		name     string
		selector bool
	}{{"dflash-moe-tiny", false}, {"dflash2-moe-tiny", true}} {
		t.Run(c.name, func(t *testing.T) {
			f := dflashtest.Load(t, c.name)
			tf := qwen35test.Load(t, "qwen35moe-tiny")
			mlxtest.Run(t, func(t *mlxtest.T) {
				target := tf.Target(t, nil)
				defer target.(*qwen35moe.Model).Free()
				draft := f.Draft(t, target)

				// The first round's block: the prompt's last token at slot
				// T−1, conditioned on the taps of slots 0 … T−2.
				prompt := f.Ref.PromptIDs
				T := len(prompt)
				_, mask := draft.BlockParams()
				block := []int32{prompt[T-1]}
				for range 7 {
					block = append(block, mask)
				}
				caches := draft.NewCaches()
				defer qwen35test.FreeCaches(caches)
				h, _ := draft.Forward(&model.Batch{
					InputIDs:     mlx.FromInt32s(block, 1, len(block)),
					SeqOffsets:   []int{0}, // the context rows start at slot 0; the block follows them
					SeqQueryLens: []int{len(block)},
					Hidden:       dflashtest.Features(target, prompt[:T-1]),
				}, nil, caches)
				logits := draft.Unembed(qwen35test.Rows(h, 1, len(block)))
				qwen35test.Within(t, "first block's draft logits, max abs error", dflashtest.MaxAbs(t, logits, f.RefTensor(t, "first_block_draft_logits")), qwen35test.LogitTol)

				run := dflashtest.RunSpeculative(t, target, draft, c.selector, prompt, len(f.Ref.TargetGreedyIDs))
				if !slices.Equal(run.Tokens, f.Ref.TargetGreedyIDs) {
					t.Fatalf("speculative output %v\nwant the target's greedy %v", run.Tokens, f.Ref.TargetGreedyIDs)
				}
				loop := f.Ref.SpecLoop
				if len(run.Proposals) != len(loop.Rounds) {
					t.Fatalf("%d proposals, the reference loop has %d rounds", len(run.Proposals), len(loop.Rounds))
				}
				// Rounds near the budget draft fewer than 7 tokens; the
				// reference always ran the full block of 8 and kept the
				// first drafts, which the core does only for drafts it
				// knows to be bidirectional, so only full rounds are
				// compared token for token.
				accepted, compared := 0, 0
				for r, p := range run.Proposals {
					want := loop.Rounds[r]
					if p.Anchor != want.BlockIDs[0] {
						t.Errorf("round %d anchored on %d, the reference on %d", r, p.Anchor, want.BlockIDs[0])
					}
					if len(want.BlockIDs) == 8 {
						compared++
						if !slices.Equal(p.Tokens, want.BlockIDs[1:]) {
							t.Errorf("round %d drafted %v, the reference %v", r, p.Tokens, want.BlockIDs[1:])
						}
					}
					accepted += want.AcceptanceLength - 1
				}
				if run.Stats.Accepted != accepted {
					t.Errorf("%d drafts accepted, the reference loop accepted %d", run.Stats.Accepted, accepted)
				}
				if compared < 20 {
					t.Errorf("only %d rounds drafted a full block", compared)
				}
				t.Logf("%d rounds, %d of them full blocks drafted as the reference did; acceptance lengths %v", len(run.Proposals), compared, fmt.Sprint(loop.AcceptanceLengths))
			})
		})
	}
}
