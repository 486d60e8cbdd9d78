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

// Confidence truncation (docs/dflash.md, "Verifying only the drafts the draft is sure of"): a round verifies the leading drafts
// whose product of confidences reaches the floor, at least one.

func TestConfidentPrefix(t *testing.T) {
	conf := []float32{0.9, 0.75, 0.5, 0.9} // running products 0.9, 0.675, 0.3375, 0.30375
	for _, c := range []struct {
		floor float64
		want  int
	}{
		{0.0001, 4},
		{0.3, 4},  // 0.30375 >= 0.3
		{0.31, 3}, // 0.30375 < 0.31
		{0.35, 2}, // 0.3375 < 0.35
		{0.67, 2},
		{0.7, 1},
		{0.95, 1}, // the first draft is kept however unsure
	} {
		if got := confidentPrefix(conf, c.floor); got != c.want {
			t.Errorf("confidentPrefix(%v, %g) = %d, want %d", conf, c.floor, got, c.want)
		}
	}
	if got := confidentPrefix([]float32{0.2}, 0.5); got != 1 {
		t.Errorf("one draft: %d, want 1", got)
	}
}

// hotFor is the logit that gives a one-hot row of the fake vocabulary (one
// logit h, seven zeros) the largest probability p: e^h / (e^h + 7) = p.
func hotFor(p float64) float32 { return float32(math.Log(7 * p / (1 - p))) }

// A block session asked for confidences (a confidence floor will read them)
// reports each position's largest probability at temperature 1, whatever
// the request's temperature: 0.9, 0.75, 0.5, 0.9 for the hot logits made
// for them; a selector reports its scores' (the fake's [0, 2]: e² / (1 +
// e²)). Unasked, it reports none.
func TestProposalConfidence(t *testing.T) {
	for _, temp := range []float32{0, 1} {
		t.Run(fmt.Sprintf("temperature %g", temp), func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				succ := map[int32]int32{1: 2, 2: 3, 3: 4, 4: 5, 5: 1}
				r := newRig(succ, 5, false)
				r.draft.hot = []float32{hotFor(0.9), hotFor(0.75), hotFor(0.5), hotFor(0.9)}
				// Unasked (no confidence floor), a session spends nothing on them.
				unasked := newRig(succ, 5, false)
				u := unasked.session(sample.Options{Temperature: temp, UseSeed: true, Seed: 3})
				defer u.Close()
				u.Committed(ids(1), oneHot([]int32{1}), 0)
				if cand := u.Propose(mlx.FromInt32s([]int32{2}, 1), 4); cand.Confidence != nil {
					t.Fatalf("a proposal nobody asked confidences of carries them")
				}

				s := r.session(sample.Options{Temperature: temp, UseSeed: true, Seed: 3})
				defer s.Close()
				s.proposeConfidence()
				s.Committed(ids(1), oneHot([]int32{1}), 0)
				cand := s.Propose(mlx.FromInt32s([]int32{2}, 1), 4)
				t.Eval(cand.Arrays()...)
				got := t.Float32s(cand.Confidence)
				for i, want := range []float64{0.9, 0.75, 0.5, 0.9} {
					if math.Abs(float64(got[i])-want) > 1e-6 {
						t.Fatalf("confidences %v, want [0.9 0.75 0.5 0.9]", got)
					}
				}

				sel := newRig(succ, 4, true)
				ss := sel.session(sample.Options{Temperature: temp, UseSeed: true, Seed: 3})
				defer ss.Close()
				ss.proposeConfidence()
				ss.Committed(ids(1), oneHot([]int32{1}), 0)
				cand = ss.Propose(mlx.FromInt32s([]int32{2}, 1), 3)
				t.Eval(cand.Arrays()...)
				want := math.Exp(2) / (1 + math.Exp(2))
				for _, c := range t.Float32s(cand.Confidence) {
					if math.Abs(float64(c)-want) > 1e-6 {
						t.Fatalf("selector confidences %v, want %.6f each", t.Float32s(cand.Confidence), want)
					}
				}
			})
		})
	}
}

// A floor changes how many rows each verification forwards, not what is
// emitted: the draft is right at every position, sure of positions 1-2
// (0.9, 0.75) and unsure of position 3 (0.5), so a floor of 0.35 verifies
// 2 drafts a round (0.9 · 0.75 · 0.5 = 0.3375 < 0.35), a floor of 0.3 all
// 4 (0.30375), and no floor all 4.
func TestConfidenceFloorCutsRowsNotOutput(t *testing.T) {
	succ := map[int32]int32{1: 2, 2: 3, 3: 4, 4: 5, 5: 1}
	run := func(t *mlxtest.T, floor float64) ([]int32, []forwardCall, *Stats) {
		r := newRig(succ, 5, false)
		r.draft.hot = []float32{hotFor(0.9), hotFor(0.75), hotFor(0.5), hotFor(0.9)}
		r.core.cfg.ConfidenceFloor = floor
		sess := r.core.Open(Request{Sampler: sample.New(sample.Options{}, []int32{1})})
		sess.pinLimit(4)
		d := sess.Decoder(1, 0)
		res, err := Run(context.Background(), d, 12, func(int32) error { return nil })
		t.NoErr(err)
		d.Close()
		sess.Close()
		return res.Tokens, r.target.forwards, sess.Stats()
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		chain := []int32{2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3}
		// Rounds 1-2: a plain step with the next one in flight (the draft
		// has seen nothing yet), then its drained token. Then rounds of
		// current + 4 drafts (5 tokens each) or current + 2 drafts (3
		// tokens each); with 3 rounds of 3 the last token of 12 is a plain
		// step, again with its successor in flight.
		for _, c := range []struct {
			floor float64
			want  []forwardCall
		}{
			{0, []forwardCall{{0, 1}, {1, 1}, {2, 5}, {7, 5}}},
			{0.3, []forwardCall{{0, 1}, {1, 1}, {2, 5}, {7, 5}}},
			{0.35, []forwardCall{{0, 1}, {1, 1}, {2, 3}, {5, 3}, {8, 3}, {11, 1}, {12, 1}}},
		} {
			got, forwards, st := run(t, c.floor)
			if !slices.Equal(got, chain) {
				t.Fatalf("floor %g: tokens %v, want %v", c.floor, got, chain)
			}
			if !slices.Equal(forwards, c.want) {
				t.Fatalf("floor %g: target forwards %v, want %v", c.floor, forwards, c.want)
			}
			if st.Drafted != st.Accepted {
				t.Fatalf("floor %g: %d drafted, %d accepted; the draft is always right", c.floor, st.Drafted, st.Accepted)
			}
		}
	})
}
