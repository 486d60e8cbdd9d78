package speculation

import (
	"context"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// A request's drafting rounds are split into host phases only while MLX's
// evaluation timing is on; then every drafting round is counted, every
// phase is a share of host time (none negative), the forward's build is
// among them, and together they fit in the request's wall time.
func TestHostPhasesWhileEvalTiming(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		target, draft := markovPair(3, 12, 0.7, 3)
		r := newMarkovRig(target, draft, 4)
		prompt := []int32{1, 2, 3}
		_, st, err := r.generate(context.Background(), prompt, sample.Options{}, 40, 3, false)
		t.NoErr(err)
		if st.HostPhases != nil {
			t.Fatalf("host phases %+v recorded with evaluation timing off", *st.HostPhases)
		}

		defer mlx.SetEvalTiming(mlx.SetEvalTiming(true))
		t0 := time.Now()
		_, st, err = newMarkovRig(target, draft, 4).generate(context.Background(), prompt, sample.Options{}, 40, 3, false)
		wall := float64(time.Since(t0)) / float64(time.Millisecond)
		t.NoErr(err)
		p := st.HostPhases
		if p == nil || st.DraftRounds == 0 {
			t.Fatalf("no host phases (%v) or no drafting rounds (%d) with evaluation timing on", p, st.DraftRounds)
		}
		if p.Rounds != st.DraftRounds {
			t.Fatalf("host phases over %d rounds, but %d drafting rounds ran", p.Rounds, st.DraftRounds)
		}
		phases := []float64{p.ProposeMS, p.ScheduleMS, p.ForwardMS, p.VerdictMS, p.ReadMS, p.CommitMS, p.DraftCommitMS, p.EmitMS}
		sum := 0.0
		for i, ms := range phases {
			if ms < 0 {
				t.Fatalf("phase %d took %g ms: %+v", i, ms, *p)
			}
			sum += ms
		}
		if p.ForwardMS <= 0 || sum > wall {
			t.Fatalf("phases %+v: forward %g ms, sum %g ms, want a forward > 0 and a sum within the request's %g ms", *p, p.ForwardMS, sum, wall)
		}
	})
}
