package speculation

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// The scenarios of spec/speculation.md section 12 (S1–S9), with the seed's
// expected values.

// S1: a run at the flush cap writes through at once; a later run is buffered
// and settle writes only the rows past the frontier.
func TestCommittedBuffersPastFlushCap(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRig(nil, 4, false)
		s := r.session(sample.Options{})
		run := make([]int32, pendingFlushTokens)
		for i := range run {
			run[i] = int32(i % fakeVocab)
		}
		s.Committed(ids(run...), oneHot(run), 0)
		if len(r.draft.calls) != 1 {
			t.Fatalf("draft calls after a cap-sized run = %d, want 1", len(r.draft.calls))
		}
		if got := r.caches[1].Offset(); got != 256 {
			t.Fatalf("draft cache offset %d, want 256", got)
		}
		s.Committed(ids(1, 2, 3), oneHot([]int32{1, 2, 3}), 255)
		if len(r.draft.calls) != 1 {
			t.Fatalf("a run below the cap was written at once (%d calls)", len(r.draft.calls))
		}
		s.Settle()
		checkCalls(t, r.draft.calls[1:], blockCall{offset: 256, ctx: []int32{2, 3}})
		if got := r.caches[1].Offset(); got != 258 {
			t.Fatalf("draft cache offset %d, want 258", got)
		}
	})
}

// S2: a run that would leave slots unfed panics.
func TestCommittedGapPanics(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRig(nil, 4, false)
		s := r.session(sample.Options{})
		s.Committed(ids(1), oneHot([]int32{1}), 0)
		defer func() {
			if recover() == nil {
				t.Fatalf("a run at slot 3 with the frontier at 1 did not panic")
			}
		}()
		s.Committed(ids(4), oneHot([]int32{4}), 3)
	})
}

// S3: a session opened over restored draft caches resumes at their offset and
// writes only the rows past it.
func TestRestoredPrefixResumes(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRig(nil, 4, false)
		r.caches[1].(*recordingCache).feed([]int32{1, 2, 3, 4, 5})
		s := r.session(sample.Options{})
		if s.ctxOffset != 5 {
			t.Fatalf("ctxOffset %d, want 5", s.ctxOffset)
		}
		s.Committed(ids(2, 3, 0, 1), oneHot([]int32{2, 3, 0, 1}), 3)
		s.Settle()
		checkCalls(t, r.draft.calls, blockCall{offset: 5, ctx: []int32{0, 1}})
		if got := streamOf(r.caches[1]); !slices.Equal(got, []int32{1, 2, 3, 4, 5, 0, 1}) {
			t.Fatalf("draft stream %v", got)
		}
	})
}

// S4: Propose declines without context or budget and caps at blockSize−1.
func TestProposeBounds(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRig(map[int32]int32{1: 2, 2: 3, 3: 4, 4: 5}, 4, false)
		s := r.session(sample.Options{})
		current := mlx.FromInt32s([]int32{1}, 1)
		if s.Propose(current, 4) != nil {
			t.Fatalf("Propose with nothing committed did not decline")
		}
		s.Committed(ids(1), oneHot([]int32{1}), 0)
		if s.Propose(current, 0) != nil {
			t.Fatalf("Propose with no budget did not decline")
		}
		cand := s.Propose(current, 10)
		if cand == nil {
			t.Fatalf("Propose declined with context and budget")
		}
		if got := ints(cand.Tokens); !slices.Equal(got, []int32{2, 3, 4}) {
			t.Fatalf("drafts %v, want [2 3 4]", got)
		}
		checkCalls(t, r.draft.calls, blockCall{offset: 0, ctx: []int32{1}, block: []int32{1, 6, 6, 6}})
	})
}

// S5: the next write path rewinds the block before appending context.
func TestBlockRewoundBeforeContextWrites(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRig(map[int32]int32{2: 3, 3: 4, 4: 5}, 4, false)
		s := r.session(sample.Options{})
		s.Committed(ids(1), oneHot([]int32{1}), 0)
		if s.Propose(mlx.FromInt32s([]int32{2}, 1), 3) == nil {
			t.Fatalf("Propose declined")
		}
		if got := streamOf(r.caches[1]); !slices.Equal(got, []int32{1, 2, 6, 6, 6}) {
			t.Fatalf("draft stream after the proposal %v, want [1 2 6 6 6]", got)
		}
		s.Committed(ids(2, 3, 4), oneHot([]int32{2, 3, 4}), 1)
		s.Settle()
		if got := streamOf(r.caches[1]); !slices.Equal(got, []int32{1, 2, 3, 4}) {
			t.Fatalf("draft stream after settle %v, want [1 2 3 4]", got)
		}
		if r.caches[1].Offset() != 4 {
			t.Fatalf("draft offset %d, want 4", r.caches[1].Offset())
		}
		if got := r.draft.calls[1]; !got.equal(blockCall{offset: 1, ctx: []int32{2, 3, 4}}) {
			t.Fatalf("context flush %v", got)
		}
	})
}

// S6: Close rewinds an outstanding block even with nothing pending.
func TestCloseDrainsOutstandingBlock(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRig(map[int32]int32{2: 3, 3: 4, 4: 5}, 4, false)
		s := r.session(sample.Options{})
		s.Committed(ids(1), oneHot([]int32{1}), 0)
		if s.Propose(mlx.FromInt32s([]int32{2}, 1), 3) == nil {
			t.Fatalf("Propose declined")
		}
		s.Close()
		if got := streamOf(r.caches[1]); !slices.Equal(got, []int32{1}) {
			t.Fatalf("draft stream after close %v, want [1]", got)
		}
	})
}

// S7: end-to-end decode with a block draft whose chain mirrors the target.
func TestDecodeBlockDraft(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const eos = 7
		r := newRig(map[int32]int32{1: 2, 2: 3, 3: 4, 4: 5, 5: eos, eos: 0}, 3, false, eos)
		sess := r.core.Open(Request{Sampler: sample.New(sample.Options{}, []int32{1})})
		sess.pinLimit(4)
		d := sess.Decoder(1, 0)
		var content string
		res, err := Run(context.Background(), d, 20, func(tok int32) error {
			content += fmt.Sprint(tok)
			return nil
		})
		t.NoErr(err)
		d.Close()
		sess.Close()
		if content != "2345" || res.Reason != DoneStop {
			t.Fatalf("content %q reason %q, want \"2345\" and stop", content, res.Reason)
		}
		if !slices.Equal(res.Tokens, []int32{2, 3, 4, 5, eos}) {
			t.Fatalf("outputs %v, want [2 3 4 5 7]", res.Tokens)
		}
		if want := []forwardCall{{0, 1}, {1, 1}, {2, 3}}; !slices.Equal(r.target.forwards, want) {
			t.Fatalf("target forwards %v, want %v", r.target.forwards, want)
		}
		checkCalls(t, r.draft.calls,
			blockCall{offset: 0, ctx: []int32{2, 3}},
			blockCall{offset: 2, block: []int32{3, 6, 6}},
			blockCall{offset: 2, ctx: []int32{4, 5, 7}})
		if r.caches[1].Offset() != r.caches[0].Offset() || r.caches[0].Offset() != 5 {
			t.Fatalf("draft offset %d, target offset %d, want both 5", r.caches[1].Offset(), r.caches[0].Offset())
		}
		if slices.Contains(streamOf(r.caches[1]), 6) {
			t.Fatalf("draft cache keeps block rows: %v", streamOf(r.caches[1]))
		}
		st := sess.Stats()
		if st.Iterations != 3 || st.Drafted != 2 || st.Accepted != 2 {
			t.Fatalf("stats: %d iterations, %d drafted, %d accepted; want 3, 2, 2", st.Iterations, st.Drafted, st.Accepted)
		}
	})
}

// S8: a selector proposal at T = 0 and T = 1, and its verification against a
// dense (T = 1) or one-hot (T = 0) target.
func TestSelectorProposalAndRejection(t *testing.T) {
	for _, temp := range []float32{0, 1} {
		t.Run(fmt.Sprintf("temperature %g", temp), func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				r := newRig(map[int32]int32{1: 2, 2: 3, 3: 4, 4: 5, 0: 2}, 4, true)
				opts := sample.Options{Temperature: temp, UseSeed: true, Seed: 42}
				s := r.session(opts)
				defer s.Close()
				s.Committed(ids(1), oneHot([]int32{1}), 0)
				cand := s.Propose(mlx.FromInt32s([]int32{1}, 1), 3)
				if cand == nil {
					t.Fatalf("Propose declined")
				}
				t.Eval(cand.Arrays()...)
				if cand.Dist.IDs == nil || !slices.Equal(ints(cand.Dist.IDs), []int32{2, 0, 3, 0, 4, 0}) {
					t.Fatalf("selector support %v, want [2 0 3 0 4 0]", cand.Dist.IDs)
				}
				want := 0.0
				if temp > 0 {
					want = 1 / (1 + math.Exp(2))
				}
				for i, q := range t.Float32s(cand.Dist.Probs) {
					expect := want
					if i%2 == 1 {
						expect = 1 - want
					}
					if math.Abs(float64(q)-expect) > 1e-6 {
						t.Fatalf("proposal probability %d = %g, want %g", i, q, expect)
					}
				}
				if temp == 0 && !slices.Equal(ints(cand.Tokens), []int32{0, 0, 0}) {
					t.Fatalf("drafts %v, want [0 0 0]", ints(cand.Tokens))
				}
				// A fresh speculation session over the target cache only.
				target := newRig(r.target.succ, 0, false)
				sess := target.core.Open(Request{Sampler: sample.New(opts, nil)})
				v, err := sess.settle(sess.verify(0, mlx.FromInt32s([]int32{1}), cand, 1))
				t.NoErr(err)
				if len(v.tokens) == 0 || v.tokens[0] != 2 || (temp == 0 && (v.accepted != 0 || len(v.tokens) != 1)) {
					t.Fatalf("accepted %d, emitted %v; want target token 2 first", v.accepted, v.tokens)
				}
			})
		})
	}
}

// S9: a selector session keeps the fixed depth and leaves the controller
// untouched; a plain block draft takes the controller's depth.
func TestSelectorDraftKeepsFixedDepth(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		succ := map[int32]int32{1: 2}
		plain := newRig(succ, 8, false)
		req := func() Request { return Request{Sampler: sample.New(sample.Options{}, []int32{1, 2, 3})} }
		ps := plain.core.Open(req())
		if ps.fixedDepth || ps.limit != plain.core.depth.Scheduled() {
			t.Fatalf("block draft: fixedDepth %v limit %d, want the controller's %d", ps.fixedDepth, ps.limit, plain.core.depth.Scheduled())
		}
		ps.Close()

		sel := newRig(succ, 8, true)
		s := sel.core.Open(req())
		defer s.Close()
		if !s.fixedDepth || s.limit != dflash2Depth {
			t.Fatalf("selector draft: fixedDepth %v limit %d, want true and %d", s.fixedDepth, s.limit, dflash2Depth)
		}
		scheduled := sel.core.depth.Scheduled()
		for _, accepted := range []int{0, 3, dflash2Depth} {
			s.beginRound()
			s.endRound(dflash2Depth, accepted, dflash2Depth)
			if s.limit != dflash2Depth {
				t.Fatalf("limit %d after accepting %d, want %d", s.limit, accepted, dflash2Depth)
			}
		}
		if slices.ContainsFunc(sel.core.depth.Seen(), func(n int) bool { return n != 0 }) || sel.core.depth.Scheduled() != scheduled {
			t.Fatalf("fixed-depth rounds trained the controller: seen %v", sel.core.depth.Seen())
		}
	})
}

// A prefill's chunks end at every break (the prompt cache's checkpoints),
// at most PrefillChunk tokens apart, and write the whole body in order;
// breaks outside the body are ignored.
func TestPrefillChunksEndAtBreaks(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRig(nil, 0, false)
		body := 2*PrefillChunk + 9
		prompt := make([]int32, body+1)
		for i := range prompt {
			prompt[i] = int32(i % fakeVocab)
		}
		s := r.core.Open(Request{Sampler: sample.New(sample.Options{}, prompt)})
		defer s.Close()
		seed, pos, err := s.Prefill(context.Background(), prompt, 0, 5, PrefillChunk+3, body, body+7)
		t.NoErr(err)
		if seed != prompt[body] || pos != body {
			t.Fatalf("seed %d at %d, want %d at %d", seed, pos, prompt[body], body)
		}
		want := []forwardCall{{0, 5}, {5, PrefillChunk - 2}, {PrefillChunk + 3, PrefillChunk}, {2*PrefillChunk + 3, 6}}
		if !slices.Equal(r.target.forwards, want) {
			t.Fatalf("target forwards %v, want %v", r.target.forwards, want)
		}
		if got := s.Stats().PrefillForwards; got != len(want) {
			t.Fatalf("stats count %d prefill forwards, want %d", got, len(want))
		}
		if !slices.Equal(streamOf(r.caches[0]), prompt[:body]) {
			t.Fatalf("the target cache holds %d tokens that are not the prompt's first %d", r.caches[0].Offset(), body)
		}
	})
}
