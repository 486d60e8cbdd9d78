package speculation

import (
	"fmt"
	"time"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/sample"
)

// verdict is the outcome of one verification.
type verdict struct {
	tokens   []int32 // emitted: accepted drafts, then the residual or bonus unless an EOS ended the run
	accepted int     // leading drafts that passed (cut at an accepted EOS)
	observed int     // positions whose outcome is known (for the controller)
	keep     int     // drafts whose slots stay in the target caches
}

// accept verifies candidates after current (at slot before) in one target
// forward and applies the speculative-sampling rule (spec 6.1). Each emitted
// token is distributed as the target's next-token distribution given the
// emitted prefix, whatever the proposal.
func (s *Session) accept(before int, current int32, cand *Candidates) (v verdict, err error) {
	cfg := &s.core.cfg
	n := cand.N()
	// 1. Rollback points after current and each of the first n−1 drafts; any
	// exit before step 12 commits keep = 0.
	cache.Schedule(cfg.TargetCaches, before+1, n)
	committed := false
	defer func() {
		if !committed {
			cache.Commit(cfg.TargetCaches, 0, n, before+1)
		}
	}()

	// 2. One forward over [current, d_0 … d_{n−1}]: row i predicts d_i, row n
	// is the bonus row.
	drafts := mlx.Reshape(mlx.AsType(cand.Tokens, mlx.Int32), n)
	ids := mlx.Reshape(mlx.Concatenate(0, mlx.FromInt32s([]int32{current}), drafts), 1, n+1)
	hidden, aux := cfg.Target.Forward(&model.Batch{InputIDs: ids, SeqOffsets: []int{before}, SeqQueryLens: []int{n + 1}}, cfg.TargetCaches)

	// 3. Target distributions, row i's penalty history extended by d_0 … d_{i−1}.
	logits := cfg.Target.Unembed(hidden)
	probe := s.logitsProbe(logits)
	p := s.sampler.Distribution(mlx.Reshape(logits, n+1, logits.Dim(-1)), drafts)
	pd := p.Slice(0, n)

	// 4. Accept d_i with probability min(1, p_i/q_i): u·q < p, defined for q = 0.
	pi := sample.Prob(pd, drafts)
	qi := sample.Prob(cand.Dist, drafts)
	u := s.sampler.Uniform(n)
	flags := mlx.Less(mlx.Multiply(u, qi), pi)
	// 5. Residual draws for every row at once; 6. the bonus from row n.
	res := s.sampler.SampleDistribution(sample.Residual(pd, cand.Dist))
	bonus := s.sampler.SampleDistribution(p.Slice(n, n+1))

	// 7. One evaluation. Waiting on the drafts first splits the round's time
	// into draft and verify (the draft was started asynchronously).
	if err := mlx.Eval(drafts); err != nil {
		return v, err
	}
	t1 := time.Now()
	outs := []*mlx.Array{flags, res, bonus}
	if probe != nil {
		outs = append(outs, probe)
	}
	if err := mlx.Eval(outs...); err != nil {
		return v, err
	}
	t2 := time.Now()
	if err := checkProbe(probe); err != nil {
		return v, err
	}
	s.roundDraftMS, s.roundVerify = msSince(s.roundBegin, t1), msSince(t1, t2)
	s.stats.DraftMS += s.roundDraftMS
	s.stats.VerifyMS += s.roundVerify

	d, err := drafts.Int32s()
	if err != nil {
		return v, err
	}
	acc, err := flags.Bools()
	if err != nil {
		return v, err
	}
	resTok, err := res.Int32s()
	if err != nil {
		return v, err
	}
	bonusTok, err := bonus.Int32s()
	if err != nil {
		return v, err
	}
	if len(d) != n || len(acc) != n || len(resTok) != n || len(bonusTok) != 1 {
		panic(fmt.Sprintf("speculation: verification shapes: %d drafts, %d flags, %d residuals, %d bonus for n = %d", len(d), len(acc), len(resTok), len(bonusTok), n))
	}

	// 8. Leading accepted drafts.
	for v.accepted < n && acc[v.accepted] {
		v.accepted++
	}
	v.observed = n
	// 9. An accepted EOS ends the request: it is emitted but not kept (the
	// next turn will not contain it, and a recurrent state cannot drop a
	// folded-in token).
	done := false
	v.keep = v.accepted
	for i := range v.accepted {
		if s.core.IsEOS(d[i]) {
			done = true
			v.accepted, v.observed, v.keep = i+1, i+1, i
			break
		}
	}
	// 10–11. Emitted tokens.
	v.tokens = append(v.tokens, d[:v.accepted]...)
	if !done {
		if v.accepted < n {
			v.tokens = append(v.tokens, resTok[v.accepted])
		} else {
			v.tokens = append(v.tokens, bonusTok[0])
		}
	}
	// 12. Keep current and the first keep drafts in the target caches.
	cache.Commit(cfg.TargetCaches, v.keep, n, before+1)
	committed = true
	// 13. Report the kept run before returning, so a cancelled emission still
	// leaves the draft level with the caches.
	if s.draft != nil {
		s.draft.Committed(mlx.SliceAxis(ids, 1, 0, v.keep+1), mlx.SliceAxis(aux, 1, 0, v.keep+1), before)
	}
	// 14. The penalty history.
	s.sampler.Commit(v.tokens)
	return v, nil
}
