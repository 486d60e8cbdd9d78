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
	s.phases.lap(&s.phases.sums.ScheduleMS)
	hidden, aux := cfg.Target.Forward(&model.Batch{InputIDs: ids, SeqOffsets: []int{before}, SeqQueryLens: []int{n + 1}}, cfg.TargetCaches)
	s.phases.lap(&s.phases.sums.ForwardMS)

	// 3. Target distributions, row i's penalty history extended by d_0 … d_{i−1}.
	logits := cfg.Target.Unembed(hidden)
	probe := s.logitsProbe(logits)
	p := s.sampler.Distribution(mlx.Reshape(logits, n+1, logits.Dim(-1)), drafts)
	var flags, res, bonus *mlx.Array
	if s.sampler.Temperature() <= 0 {
		flags, res, bonus = greedyVerdict(p, drafts, n)
		// The general path's three draws (the uniforms, the residuals, the
		// bonus) each take a key; skipping them keeps the keys that follow.
		s.sampler.Skip(3)
	} else {
		pd := p.Slice(0, n)
		// 4. Accept d_i with probability min(1, p_i/q_i): u·q < p, defined for q = 0.
		pi := sample.Prob(pd, drafts)
		qi := sample.Prob(cand.Dist, drafts)
		u := s.sampler.Uniform(n)
		flags = mlx.Less(mlx.Multiply(u, qi), pi)
		// 5. Residual draws for every row at once; 6. the bonus from row n.
		res = s.sampler.SampleDistribution(sample.Residual(pd, cand.Dist))
		bonus = s.sampler.SampleDistribution(p.Slice(n, n+1))
	}

	// 7. One evaluation, read back in one small transfer: the outcome is
	// reduced on the device to [accepted, d_0 … d_{n−1}, next] (see
	// outcome). Waiting on the proposal first splits the round's time into
	// draft and verify (the draft was started asynchronously, and its own
	// arrays signal when it is done); the verification is submitted before
	// that wait, so the device goes on from the draft to it without waiting
	// for the host.
	packed := outcome(flags, drafts, res, bonus)
	outs := []*mlx.Array{packed}
	if probe != nil {
		outs = append(outs, probe)
	}
	if !cfg.NoPipeline {
		_ = mlx.AsyncEval(outs...)
	}
	s.phases.lap(&s.phases.sums.VerdictMS)
	if err := mlx.Eval(cand.Tokens); err != nil {
		return v, err
	}
	t1 := time.Now()
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

	got, err := packed.Int32s()
	if err != nil {
		return v, err
	}
	if len(got) != n+2 || got[0] < 0 || int(got[0]) > n {
		panic(fmt.Sprintf("speculation: verification outcome %v for n = %d", got, n))
	}
	d, next := got[1:n+1], got[n+1]

	// 8. Leading accepted drafts.
	v.accepted = int(got[0])
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
		// The residual of row accepted, or the bonus when all passed.
		v.tokens = append(v.tokens, next)
	}
	s.phases.lap(&s.phases.sums.ReadMS)
	// 12. Keep current and the first keep drafts in the target caches.
	cache.Commit(cfg.TargetCaches, v.keep, n, before+1)
	committed = true
	s.phases.lap(&s.phases.sums.CommitMS)
	// 13. Report the kept run before returning, so a cancelled emission still
	// leaves the draft level with the caches.
	if s.draft != nil {
		s.draft.Committed(mlx.SliceAxis(ids, 1, 0, v.keep+1), mlx.SliceAxis(aux, 1, 0, v.keep+1), before)
	}
	s.phases.lap(&s.phases.sums.DraftCommitMS)
	// 14. The penalty history.
	s.sampler.Commit(v.tokens)
	s.phases.lap(&s.phases.sums.CommitMS)
	s.phases.endRound()
	return v, nil
}

// greedyVerdict is steps 4–6 at temperature 0, where each row of p is one
// token with probability 1, the target's choice g_i: the test u·q_i < p_i
// passes exactly when d_i = g_i (u < 1, q_i ≤ 1), a rejected row's residual
// keeps only g_i (p's support), and the bonus is g_n. So the verdict is an
// id comparison, a handful of nodes where the general path builds about
// twenty; TestGreedyVerdictMatchesGeneral holds the two equal.
func greedyVerdict(p sample.Distribution, drafts *mlx.Array, n int) (flags, res, bonus *mlx.Array) {
	g := mlx.Reshape(p.IDs, n+1)
	res = mlx.SliceAxis(g, 0, 0, n)
	return mlx.Equal(res, drafts), res, mlx.SliceAxis(g, 0, n, n+1)
}

// outcome reduces a verification to what the host needs, as one int32 array
// [n+2]: the number of leading accepted drafts a (the leading true flags),
// the n drafts, and the token after the accepted run — row a's residual
// draw when a < n, the bonus draw when every draft passed. flags is [n]
// bool, drafts and res [n] int32, bonus [1] int32. It makes no scalar
// constants: those are cached for the process by value, and depths vary.
func outcome(flags, drafts, res, bonus *mlx.Array) *mlx.Array {
	// Leading passes: positions before the first rejection, where the
	// running count of rejections is still 0.
	rejected := mlx.AsType(mlx.LogicalNot(flags), mlx.Int32)
	before := mlx.LogicalNot(mlx.AsType(mlx.Cumsum(rejected, 0, false, true), mlx.Bool))
	a := mlx.AsType(mlx.Sum(mlx.AsType(before, mlx.Int32), false), mlx.Int32)
	// Index a of [res_0 … res_{n−1}, bonus].
	next := mlx.Take(mlx.Concatenate(0, res, mlx.AsType(mlx.Reshape(bonus, 1), mlx.Int32)), a, 0)
	return mlx.Concatenate(0, mlx.Reshape(a, 1), drafts, mlx.Reshape(next, 1))
}

// truncate cuts a proposal that carries confidences before its first draft
// whose product of confidences with every draft before it — at temperature
// 0 the draft's estimate that all of them are accepted — is below the
// core's confidence floor (docs/dflash.md, "Verifying only the drafts the
// draft is sure of"). The first draft is always kept. Any prefix of a
// proposal is a proposal, and the confidences never depend on the drafted
// tokens themselves, so only the number of verified rows changes, never
// the output or its distribution.
func (s *Session) truncate(cand *Candidates) (*Candidates, error) {
	floor := s.core.cfg.ConfidenceFloor
	if floor <= 0 || cand.Confidence == nil || cand.N() <= 1 {
		return cand, nil
	}
	conf, err := cand.Confidence.Float32s()
	if err != nil {
		return nil, err
	}
	return cand.Prefix(confidentPrefix(conf, floor)), nil
}

// confidentPrefix is the number of leading drafts to verify: at least one,
// and then every draft while the running product of conf stays at or above
// floor.
func confidentPrefix(conf []float32, floor float64) int {
	k, p := 1, float64(conf[0])
	for k < len(conf) {
		p *= float64(conf[k])
		if p < floor {
			break
		}
		k++
	}
	return k
}
