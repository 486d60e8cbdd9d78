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

// verification is one round's verification, built and submitted to the
// device, whose outcome the host has not read yet.
type verification struct {
	before int // slot of the round's first row, current
	n      int // drafts verified
	// from is the first rollback point scheduled on the target caches:
	// before+1 for a round built after the previous verdict, before for a
	// chained one, which may have to be dropped whole.
	from     int
	cand     *Candidates
	ids, aux *mlx.Array // the forwarded rows [1, n+1] and the target's aux rows
	packed   *mlx.Array // the outcome (see outcome)
	probe    *mlx.Array // the first logits' check (nil after the first round)
	// bonus is the target's own token after the drafts, the next round's
	// current if every draft passes: a greedy round's alone (nil when
	// sampling, where it is a draw tied to the verdict's keys).
	bonus *mlx.Array
	// chained is set for a round built before the previous verdict was
	// read, and budget is the remaining budget of the Next call it was
	// built for.
	chained bool
	budget  int
}

// count is the number of rollback points scheduled for v.
func (v *verification) count() int { return v.before + 1 + v.n - v.from }

// keepIndex is the rollback point at which v's caches keep current and the
// first keep drafts.
func (v *verification) keepIndex(keep int) int { return v.before + 1 + keep - v.from }

// arrays are what v holds across a sweep.
func (v *verification) arrays() []*mlx.Array {
	out := append(v.cand.Arrays(), v.ids, v.aux, v.packed)
	if v.probe != nil {
		out = append(out, v.probe)
	}
	if v.bonus != nil {
		out = append(out, v.bonus)
	}
	return out
}

// settle reads v's outcome and commits it: the caches keep the accepted
// run, the draft hears of it and the sampler's history takes the emitted
// tokens. On an error the caches keep current alone.
func (s *Session) settle(v *verification) (verdict, error) {
	held := cache.Hold(s.core.cfg.TargetCaches, v.from, v.count())
	out, err := s.read(v)
	if err != nil {
		held.Resolve(v.keepIndex(0))
		return out, err
	}
	s.commit(v, held, out, false)
	return out, nil
}

// verify, read and commit verify a proposal after current (at slot
// before) in one target forward and apply the speculative-sampling rule
// (spec 6.1): each emitted token is distributed as the target's next-token
// distribution given the emitted prefix, whatever the proposal.
//
// verify schedules rollback points from slot from on the target caches
// (before+1, or before to be able to drop the round whole), builds the
// forward over [current, d_0 … d_{n−1}] at slot before and the verdict, and
// submits them (steps 1–7 of spec 6.1 short of reading). current is [1]
// integer, host-known or the previous round's lazy bonus. The caller must
// end the schedule: settle, or Hold and a Resolve.
func (s *Session) verify(before int, current *mlx.Array, cand *Candidates, from int) *verification {
	cfg := &s.core.cfg
	n := cand.N()
	v := &verification{before: before, n: n, from: from, cand: cand}
	// 1. Rollback points: with from = before+1, after current and each of
	// the first n−1 drafts.
	cache.Schedule(cfg.TargetCaches, from, v.count())

	// 2. One forward over [current, d_0 … d_{n−1}]: row i predicts d_i, row n
	// is the bonus row.
	drafts := mlx.Reshape(mlx.AsType(cand.Tokens, mlx.Int32), n)
	if current.DType() != mlx.Int32 {
		current = mlx.AsType(current, mlx.Int32) // a lazy bonus: the argmax's dtype
	}
	v.ids = mlx.Reshape(mlx.Concatenate(0, current, drafts), 1, n+1)
	s.phases.lap(&s.phases.sums.ScheduleMS)
	var hidden *mlx.Array
	hidden, v.aux = cfg.Target.Forward(&model.Batch{InputIDs: v.ids, SeqOffsets: []int{before}, SeqQueryLens: []int{n + 1}}, cfg.TargetCaches)
	s.phases.lap(&s.phases.sums.ForwardMS)

	// 3. Target distributions, row i's penalty history extended by d_0 … d_{i−1}.
	logits := cfg.Target.Unembed(hidden)
	v.probe = s.logitsProbe(logits)
	p := s.sampler.Distribution(mlx.Reshape(logits, n+1, logits.Dim(-1)), drafts)
	var flags, res, bonus *mlx.Array
	if s.sampler.Temperature() <= 0 {
		flags, res, bonus = greedyVerdict(p, drafts, n)
		v.bonus = bonus
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
	// outcome). It is submitted now, so that the device goes on from the
	// draft to it without waiting for the host.
	v.packed = outcome(flags, drafts, res, bonus)
	if !cfg.NoPipeline {
		_ = mlx.AsyncEval(v.outputs()...)
	}
	s.phases.lap(&s.phases.sums.VerdictMS)
	return v
}

// outputs are the arrays the host reads from v.
func (v *verification) outputs() []*mlx.Array {
	if v.probe != nil {
		return []*mlx.Array{v.packed, v.probe}
	}
	return []*mlx.Array{v.packed}
}

// read waits for v's outcome and turns it into a verdict (steps 7–11).
// Waiting on the proposal first splits the round's time into draft and
// verify (the draft was started asynchronously, and its own arrays signal
// when it is done).
func (s *Session) read(v *verification) (out verdict, err error) {
	n := v.n
	if err := mlx.Eval(v.cand.Tokens); err != nil {
		return out, err
	}
	t1 := time.Now()
	if err := mlx.Eval(v.outputs()...); err != nil {
		return out, err
	}
	t2 := time.Now()
	if err := checkProbe(v.probe); err != nil {
		return out, err
	}
	s.roundDraftMS, s.roundVerify = msSince(s.roundBegin, t1), msSince(t1, t2)
	if v.chained {
		// Proposed and submitted during the previous round: what the host
		// did since this round began (building the round after it) is
		// overhead, not drafting.
		s.roundDraftMS = 0
	}
	s.stats.DraftMS += s.roundDraftMS
	s.stats.VerifyMS += s.roundVerify

	got, err := v.packed.Int32s()
	if err != nil {
		return out, err
	}
	if len(got) != n+2 || got[0] < 0 || int(got[0]) > n {
		panic(fmt.Sprintf("speculation: verification outcome %v for n = %d", got, n))
	}
	d, next := got[1:n+1], got[n+1]

	// 8. Leading accepted drafts.
	out.accepted = int(got[0])
	out.observed = n
	// 9. An accepted EOS ends the request: it is emitted but not kept (the
	// next turn will not contain it, and a recurrent state cannot drop a
	// folded-in token).
	done := false
	out.keep = out.accepted
	for i := range out.accepted {
		if s.core.IsEOS(d[i]) {
			done = true
			out.accepted, out.observed, out.keep = i+1, i+1, i
			break
		}
	}
	// 10–11. Emitted tokens.
	out.tokens = append(out.tokens, d[:out.accepted]...)
	if !done {
		// The residual of row accepted, or the bonus when all passed.
		out.tokens = append(out.tokens, next)
	}
	s.phases.lap(&s.phases.sums.ReadMS)
	return out, nil
}

// commit is steps 12–14 once v's verdict out is read: the held caches
// keep current and the first out.keep drafts, the draft hears of the kept
// run (before the tokens go back to the caller, so a cancelled emission
// still leaves it level with the caches; heard is set when it already has)
// and the sampler's penalty history takes the emitted tokens.
func (s *Session) commit(v *verification, held *cache.Held, out verdict, heard bool) {
	held.Resolve(v.keepIndex(out.keep))
	s.phases.lap(&s.phases.sums.CommitMS)
	if s.draft != nil && !heard {
		s.draft.Committed(mlx.SliceAxis(v.ids, 1, 0, out.keep+1), mlx.SliceAxis(v.aux, 1, 0, out.keep+1), v.before)
	}
	s.phases.lap(&s.phases.sums.DraftCommitMS)
	s.sampler.Commit(out.tokens)
	s.phases.lap(&s.phases.sums.CommitMS)
	s.phases.endRound()
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
