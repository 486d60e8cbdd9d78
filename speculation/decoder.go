package speculation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// PrefillChunk is the number of prompt tokens per prefill forward; cache
// state is evaluated between chunks so that memory stays bounded.
const PrefillChunk = 2048

// Prefill writes prompt[:len−1] to the target caches in chunks, reporting
// each chunk to the draft session, and returns the held-back last token (the
// decode seed) and the slot it will take (spec 4.10). The prompt must not be
// empty. Caches that already hold a prefix of the prompt (restored from a
// prompt cache: offset o, holding prompt[:o], o <= len−1, the draft's caches
// level with them) are continued: only prompt[o:len−1] is written. ctx is
// checked between chunks; on cancellation the draft session is settled so
// the caches stay level.
//
// A chunk also ends at every offset in breaks: the snapshots scheduled on
// the caches (a prompt cache's checkpoints). A snapshot then falls between
// two forwards, never inside one, where a recurrent layer would keep it as
// part of the whole chunk's per-row state (its scan's rows, its
// convolution window) for as long as the checkpoint lives.
func (s *Session) Prefill(ctx context.Context, prompt []int32, breaks ...int) (seed int32, position int, err error) {
	if len(prompt) == 0 {
		return 0, 0, errors.New("speculation: empty prompt")
	}
	from := cacheOffset(s.core.cfg.TargetCaches)
	if from > len(prompt)-1 {
		return 0, 0, fmt.Errorf("speculation: the target caches hold %d slots, more than the %d prompt tokens before the decode seed", from, len(prompt)-1)
	}
	defer func() {
		if s.draft != nil {
			s.draft.Settle()
		}
	}()
	body := prompt[:len(prompt)-1]
	for start, end := from, from; start < len(body); start = end {
		if err := ctx.Err(); err != nil {
			return 0, start, err
		}
		end = min(start+PrefillChunk, len(body))
		for _, b := range breaks {
			if start < b && b < end {
				end = b
			}
		}
		err := mlx.Scope(func() error {
			ids := mlx.FromInt32s(body[start:end], 1, end-start)
			_, aux := s.core.cfg.Target.Forward(&model.Batch{InputIDs: ids, SeqOffsets: []int{start}, SeqQueryLens: []int{end - start}}, s.core.cfg.TargetCaches)
			if s.draft != nil {
				s.draft.Committed(ids, aux, start)
			}
			return mlx.Eval(cacheState(s.core.cfg.TargetCaches)...)
		})
		if err != nil {
			return 0, start, err
		}
		s.stats.PrefillForwards++
	}
	return prompt[len(prompt)-1], len(body), nil
}

// Decoder emits tokens for one request (spec 5.2–5.4). current is the last
// emitted token: never forwarded, never returned again.
type Decoder struct {
	s        *Session
	current  int32
	position int           // slot current will take
	inner    *plainDecoder // non-nil while parked

	// early is the next round's proposal, made at the end of a drafting
	// round before its tokens go back to Run (pinned; nil if none), and
	// earlyFor the remaining budget it was made for: the device drafts
	// while the host emits, sweeps and starts the next round. earlyAnchor
	// is the current token's array the proposal was made after (pinned
	// with it): the verification takes the same array, because making an
	// array of host data waits on MLX's CUDA backend for the device's
	// queued work — here, the draft's — which would stall the host's
	// building of the verification behind the draft.
	early       *Candidates
	earlyAnchor *mlx.Array
	earlyFor    int

	// ahead is the next round's verification, chained (built and
	// submitted) before this round's verdict was read, on the guess that
	// this round passes every draft (pinned; nil if none); see chain.
	ahead *verification
	// missed is set when the last verdict rejected a draft: the next round
	// is not chained on, since a wrong guess costs the device a whole
	// verification.
	missed bool

	// emissions is the number of rounds whose tokens Run has begun to
	// emit (Emissions).
	emissions int
}

// Decoder starts decoding after seed, which will take slot position.
func (s *Session) Decoder(seed int32, position int) *Decoder {
	d := &Decoder{s: s, current: seed, position: position}
	s.decoder = d
	return d
}

// Position is the slot the next forwarded token takes.
func (d *Decoder) Position() int { return d.position }

// Emissions is the number of rounds whose tokens Run has begun to emit: 1
// while the first round's go out. A drafting round emits several tokens at
// once, so a decode rate that starts its clock at the first token must not
// count that round's others as decoded in no time (engine.Response).
func (d *Decoder) Emissions() int { return d.emissions }

// Next runs one round and returns the tokens it emits: at least one and at
// most remaining (>= 1).
func (d *Decoder) Next(remaining int) ([]int32, error) {
	s := d.s
	if d.inner != nil && s.limit > 0 {
		// Resume: drain the plain decoder's in-flight sample; closing it
		// settles the draft session, so the next proposal is primed.
		tok, pos, err := d.inner.drain()
		d.inner.close()
		d.inner = nil
		if err != nil {
			return nil, err
		}
		s.stats.round(0, 0, time.Now())
		s.untimedNext = true
		d.current, d.position = tok, pos
		s.sampler.Commit([]int32{tok})
		return []int32{tok}, nil
	}
	s.beginRound()
	v := d.takeAhead(remaining)
	if v == nil {
		cand, anchor := d.takeEarly(remaining)
		if cand == nil && s.limit > 0 && remaining > 1 && s.draft != nil {
			// Made before the draft is submitted: see Decoder.earlyAnchor.
			anchor = mlx.FromInt32s([]int32{d.current}, 1)
			cand = s.draft.Propose(anchor, min(s.limit, remaining-1))
			if cand != nil {
				// Let the draft run while the host builds the verification.
				_ = mlx.AsyncEval(cand.Arrays()...)
			}
		}
		if cand == nil {
			faulted := ""
			if f, ok := s.draft.(Faulted); ok && s.draft != nil {
				if faulted = f.FaultReason(); faulted != "" {
					// A fault lasts for the request: stay parked.
					s.limit, s.trains = 0, false
				}
			}
			s.stats.fallback(s.fallbackReason(remaining, faulted))
			if d.inner == nil {
				d.inner = &plainDecoder{s: s, current: d.current, position: d.position}
			}
			tok, err := d.inner.next()
			if err != nil {
				return nil, err
			}
			s.endRound(0, 0, 0)
			return []int32{tok}, nil
		}
		cand, err := s.truncate(cand)
		if err != nil {
			return nil, err
		}
		s.phases.lap(&s.phases.sums.ProposeMS)
		v = s.verify(d.position, anchor, cand, d.position+1)
	}
	out, err := d.settle(v, remaining)
	if err != nil {
		return nil, err
	}
	s.endRound(v.n, out.accepted, out.observed)
	d.position += 1 + out.keep
	d.current = out.tokens[len(out.tokens)-1]
	if d.ahead == nil {
		d.proposeEarly(remaining - len(out.tokens))
	}
	return out.tokens, nil
}

// settle reads v's verdict and commits it, first chaining the next round
// on v when it can (chain). A chained round is kept in d.ahead when v
// passed every draft, and dropped otherwise.
func (d *Decoder) settle(v *verification, remaining int) (verdict, error) {
	s := d.s
	next := d.chain(v, remaining)
	if next == nil {
		out, err := s.settle(v)
		d.missed = err == nil && out.accepted < v.n
		return out, err
	}
	// chain took v's write off the caches, which went on from its end.
	held, ahead := next.held, next.verification
	out, err := s.read(v)
	if err == nil && out.keep == v.n {
		s.commit(v, held, out, true)
		mlx.Pin(ahead.arrays()...)
		d.ahead = ahead
		return out, nil
	}
	// The guess was wrong, or the verdict unreadable: forget the chained
	// round and what the draft heard of v's run, then end v as an
	// unchained round would.
	d.drop(ahead)
	s.draft.(Retractor).Retract(v.before)
	if err != nil {
		held.Resolve(v.keepIndex(0))
		return out, err
	}
	d.missed = true
	s.commit(v, held, out, false)
	return out, nil
}

// chained is a round chained on v, with v's write held.
type chained struct {
	*verification
	held *cache.Held
}

// chain builds and submits the round after v before v's verdict is read,
// guessing that v passes every draft: v's write is held (cache.Hold), the
// draft hears of v's whole run and proposes after v's bonus token — the
// target's own choice after the drafts, still on the device — and the
// verification of that proposal is built from v's end. The device then
// goes from v to the next round without waiting for the host, whose
// reading of v's verdict, emitting and building overlap the next
// verification. It returns nil, touching nothing, unless the guess can be
// made and checked: greedy sampling without penalties (the bonus and the
// next distributions need no draw and no history), a draft session that
// can take reports back (Retractor), the pipeline on, the last verdict
// not a miss, and budget left for another drafting round after v's n+1
// tokens. An EOS among them is a miss like a rejection: the verdict keeps
// fewer drafts.
func (d *Decoder) chain(v *verification, remaining int) *chained {
	s := d.s
	left := remaining - (v.n + 1)
	if _, ok := s.draft.(Retractor); !ok || v.bonus == nil || s.sampler.UsesHistory() ||
		s.core.cfg.NoPipeline || s.core.cfg.NoChain || d.missed || s.limit <= 0 || left <= 1 {
		return nil
	}
	s.draft.Committed(v.ids, v.aux, v.before)
	at := v.before + v.n + 1 // the bonus token's slot
	cand := s.draft.Propose(v.bonus, min(s.limit, left-1))
	if cand != nil && cand.Confidence != nil && s.core.cfg.ConfidenceFloor > 0 {
		// Cutting on confidences reads them: the device would wait for
		// the host, which the chain exists to avoid.
		cand = nil
	}
	if cand == nil {
		s.draft.(Retractor).Retract(v.before)
		return nil
	}
	s.phases.lap(&s.phases.sums.ProposeMS)
	held := cache.Hold(s.core.cfg.TargetCaches, v.from, v.count())
	next := s.verify(at, v.bonus, cand, at)
	next.chained, next.budget = true, left
	s.stats.ChainedRounds++
	return &chained{verification: next, held: held}
}

// takeAhead returns the chained round if it was built for this call's
// budget (it always is when Run drives the decoder), releasing its pins;
// one built for another budget is dropped.
func (d *Decoder) takeAhead(remaining int) *verification {
	v := d.ahead
	if v == nil || v.budget != remaining {
		d.dropAhead()
		return nil
	}
	d.ahead = nil
	mlx.Unpin(v.arrays()...)
	return v
}

// dropAhead drops an unread chained round, leaving the caches and the
// draft where the last verdict left them.
func (d *Decoder) dropAhead() {
	if v := d.ahead; v != nil {
		d.ahead = nil
		mlx.Unpin(v.arrays()...)
		d.drop(v)
		d.s.draft.(Retractor).Retract(v.before)
	}
}

// drop ends a chained verification unread: the target caches go back to
// where it began (its schedule starts there). The device may still run it;
// its outcome is never read.
func (d *Decoder) drop(v *verification) {
	cache.Commit(d.s.core.cfg.TargetCaches, 0, v.count(), v.from)
	d.s.stats.ChainedDropped++
}

// proposeEarly makes the next round's proposal now, when that round will
// draft: Run emits this round's tokens (unless one is an EOS or an emit
// stops it) and calls Next with left tokens to go, and the proposal depends
// only on what this round committed. The draft sees the same calls in the
// same order as without it (the sampler's keys included), so output is
// unchanged. A proposal left unused when the run ends is an outstanding
// block that the session's Settle rewinds, like a rejected one.
func (d *Decoder) proposeEarly(left int) {
	s := d.s
	if s.core.cfg.NoPipeline || s.limit <= 0 || left <= 1 || s.draft == nil || s.core.IsEOS(d.current) {
		return
	}
	anchor := mlx.FromInt32s([]int32{d.current}, 1)
	cand := s.draft.Propose(anchor, min(s.limit, left-1))
	if cand == nil {
		return
	}
	mlx.Pin(anchor)
	mlx.Pin(cand.Arrays()...)
	_ = mlx.AsyncEval(cand.Arrays()...)
	d.early, d.earlyAnchor, d.earlyFor = cand, anchor, left
	s.phases.lap(&s.phases.sums.ProposeMS)
}

// takeEarly returns the early proposal if it was made for this call's
// budget (it always is when Run drives the decoder), and the current
// token's array it was made after, releasing their pins.
func (d *Decoder) takeEarly(remaining int) (*Candidates, *mlx.Array) {
	cand, anchor := d.early, d.earlyAnchor
	if cand == nil {
		return nil, nil
	}
	d.releaseEarly()
	if d.earlyFor != remaining {
		// Drafted for another budget: drop it; the next Propose rewinds
		// its block first.
		return nil, nil
	}
	return cand, anchor
}

// releaseEarly unpins and forgets the early proposal.
func (d *Decoder) releaseEarly() {
	mlx.Unpin(d.earlyAnchor)
	mlx.Unpin(d.early.Arrays()...)
	d.early, d.earlyAnchor = nil, nil
}

// Close ends decoding; a parked decoder drops its in-flight sample, and an
// unused early proposal is released (the session's Settle rewinds it).
func (d *Decoder) Close() {
	d.dropAhead()
	if d.early != nil {
		d.releaseEarly()
	}
	if d.inner != nil {
		d.inner.close()
		d.inner = nil
	}
	if d.s.decoder == d {
		d.s.decoder = nil
	}
}

// plainDecoder is the pipelined plain decoder used while parked: it
// dispatches the forward and sample of token t+1 before the host reads token
// t, so the device runs one step ahead.
type plainDecoder struct {
	s        *Session
	current  int32 // first token to forward
	position int
	started  bool

	inflight    *mlx.Array // sampled [1] int32, not yet forwarded (pinned)
	inflightPos int        // the slot inflight will take
}

// step forwards tok (a [1] int32 array, host-known or lazy) at pos, reports
// it to the draft session and samples the next token; chain is tok when the
// sampler has not seen it yet. probe is the session's first-logits check
// (logitsProbe), nil after the first step.
func (p *plainDecoder) step(tok *mlx.Array, pos int, chain *mlx.Array) (next, probe *mlx.Array) {
	cfg := &p.s.core.cfg
	ids := mlx.Reshape(tok, 1, 1)
	hidden, aux := cfg.Target.Forward(&model.Batch{InputIDs: ids, SeqOffsets: []int{pos}, SeqQueryLens: []int{1}}, cfg.TargetCaches)
	if p.s.draft != nil {
		p.s.draft.Committed(ids, aux, pos)
	}
	logits := cfg.Target.Unembed(hidden)
	return p.s.sampler.Sample(mlx.Reshape(logits, 1, logits.Dim(-1)), chain), p.s.logitsProbe(logits)
}

// next emits one token.
func (p *plainDecoder) next() (int32, error) {
	if p.s.core.cfg.NoPipeline {
		return p.nextUnpipelined()
	}
	var t, probe *mlx.Array
	var pos int
	if !p.started {
		p.started = true
		t, probe = p.step(mlx.FromInt32s([]int32{p.current}, 1), p.position, nil)
		pos = p.position + 1
	} else {
		t, pos = p.inflight, p.inflightPos
	}
	next, _ := p.step(t, pos, t)
	mlx.Pin(next)
	if p.inflight != nil {
		mlx.Unpin(p.inflight)
	}
	p.inflight, p.inflightPos = next, pos+1
	_ = mlx.AsyncEval(next)
	if probe != nil {
		if err := mlx.Eval(t, probe); err != nil {
			return 0, err
		}
		if err := checkProbe(probe); err != nil {
			return 0, err
		}
	}
	v, err := t.Int32s()
	if err != nil {
		return 0, err
	}
	p.s.sampler.Commit(v[:1])
	return v[0], nil
}

// nextUnpipelined emits one token without running ahead: it forwards
// current, reads the sample and only then returns, so nothing is in flight
// between calls (the decoder never counts as started, and drain samples
// after current as for a fresh one).
func (p *plainDecoder) nextUnpipelined() (int32, error) {
	tok, pos, err := p.drain()
	if err != nil {
		return 0, err
	}
	p.started = false
	p.current, p.position = tok, pos
	p.s.sampler.Commit([]int32{tok})
	return tok, nil
}

// drain returns the in-flight sample and its slot, starting the decoder if it
// never ran.
func (p *plainDecoder) drain() (int32, int, error) {
	if !p.started {
		// Parked and resumed without a plain step: nothing in flight, so
		// sample after current directly.
		p.started = true
		t, probe := p.step(mlx.FromInt32s([]int32{p.current}, 1), p.position, nil)
		if err := checkProbe(probe); err != nil {
			return 0, 0, err
		}
		v, err := t.Int32s()
		if err != nil {
			return 0, 0, err
		}
		return v[0], p.position + 1, nil
	}
	v, err := p.inflight.Int32s()
	if err != nil {
		return 0, 0, err
	}
	return v[0], p.inflightPos, nil
}

// close discards the in-flight sample and settles the draft session.
func (p *plainDecoder) close() {
	if p.inflight != nil {
		mlx.Unpin(p.inflight)
		p.inflight = nil
	}
	if p.s.draft != nil {
		p.s.draft.Settle()
	}
}

// DoneReason says why decoding stopped.
type DoneReason string

// Done reasons.
const (
	DoneStop   DoneReason = "stop"   // an EOS token
	DoneLength DoneReason = "length" // the token budget
)

// Result is what Run produced.
type Result struct {
	// Tokens are every emitted token in order, a final EOS included.
	Tokens []int32
	// Rest are the tokens the last round decoded after the one that ended
	// the run (an EOS, or a token whose emit returned an error): never
	// emitted, but possibly written to the caches already. A prompt cache
	// needs them to know what the caches hold.
	Rest []int32
	// Reason is why decoding stopped.
	Reason DoneReason
}

// Run decodes with d until an EOS token or budget tokens, calling emit for
// every emitted token except a final EOS. ctx is checked between rounds; a
// cancelled run returns ctx.Err() with the caches consistent. Arrays made by
// a round and not pinned are swept after it.
func Run(ctx context.Context, d *Decoder, budget int, emit func(tok int32) error) (Result, error) {
	// A round chained on the last one is never read once Run returns:
	// drop it, so that the caches hold what Result says.
	defer d.dropAhead()
	var res Result
	for len(res.Tokens) < budget {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		toks, err := d.Next(budget - len(res.Tokens))
		mlx.Sweep()
		if err != nil {
			return res, err
		}
		d.emissions++
		for i, tok := range toks {
			res.Tokens = append(res.Tokens, tok)
			if d.s.core.IsEOS(tok) {
				res.Rest = toks[i+1:]
				res.Reason = DoneStop
				return res, nil
			}
			if err := emit(tok); err != nil {
				res.Rest = toks[i+1:]
				return res, err
			}
		}
	}
	res.Reason = DoneLength
	return res, nil
}

// cacheOffset is the offset of the first cache (caches move together), 0
// when there is none.
func cacheOffset(caches []cache.Cache) int {
	for _, c := range caches {
		if c != nil {
			return c.Offset()
		}
	}
	return 0
}

func cacheState(caches []cache.Cache) []*mlx.Array {
	var out []*mlx.Array
	for _, c := range caches {
		if c != nil {
			out = append(out, c.State()...)
		}
	}
	return out
}
