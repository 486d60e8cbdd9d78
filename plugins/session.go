package plugins

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// Fault reasons a faulted session reports (speculation.Faulted), as the
// stats count them.
const (
	FaultCrash   = "plugin-crash"
	FaultTimeout = "plugin-timeout"
	FaultInvalid = "plugin-invalid"
	// FaultClosed is not a fault of the plugin: its Drafter was closed
	// (the engine was closed), so requests decode plainly.
	FaultClosed = "plugin-closed"
)

// Flushing of deferred reports.
const (
	// flushRows buffered rows force a Committed call before the next
	// Propose or Settle (the in-process session's cap, spec 4.1).
	flushRows = 256
	// maxCommittedBytes bounds one Committed message's feature bytes, so a
	// message stays well under the 64 MiB gRPC limit (spec 4 detail 3).
	maxCommittedBytes = 32<<20 - 64<<10
)

// session is the host side of one request's plugin draft session. Reports
// are deferred and sent just before the next Propose or Settle (or when
// flushRows have accumulated), so a plain decode step never waits for the
// plugin. Once faulted it makes no further calls and declines every
// proposal.
//
// Invariant: frontier is the slot after the last reported token; the
// plugin's frontier equals it minus the pending rows.
type session struct {
	d       *Drafter
	proc    *process
	id      uint64
	sampler *sample.Sampler
	seed    uint64
	round   uint64

	frontier    int
	pending     []run
	pendingRows int
	fault       string
	closed      bool
}

// run is one deferred report: tokens [1, r] and features [1, r, F] (nil
// when the plugin needs none), both pinned, at slot position.
type run struct {
	tokens, features *mlx.Array
	position         int
}

var (
	_ speculation.DraftSession = (*session)(nil)
	_ speculation.Faulted      = (*session)(nil)
)

// FaultReason names the fault that stopped the session, or "".
func (s *session) FaultReason() string { return s.fault }

// faultf records a fault and logs it once.
func (s *session) faultf(p *process, call, reason, format string, args ...any) {
	if s.fault != "" {
		return
	}
	if s.d.isClosed() {
		// The host closed the drafter under this session: expected, not
		// logged, nothing to retire.
		s.fault = FaultClosed
		s.release()
		return
	}
	s.fault = reason
	s.release()
	s.d.cfg.log.Warn("plugin draft fault: the request continues by plain decoding",
		"plugin", s.d.cfg.name, "call", call, "reason", reason, "error", fmt.Sprintf(format, args...))
	if p != nil && reason != FaultInvalid {
		s.d.retire(p)
	}
}

// callFailed classifies a failed call: the process gone or the connection lost
// is a crash, a missed deadline a hang, any other status an invalid answer.
func (s *session) callFailed(call string, err error) {
	p := s.proc
	reason := FaultInvalid
	switch code := status.Code(err); {
	case p != nil && p.exited():
		reason = FaultCrash
	case code == codes.DeadlineExceeded:
		reason = FaultTimeout
	case code == codes.Unavailable || code == codes.Canceled:
		reason = FaultCrash
	}
	s.faultf(p, call, reason, "%s failed: %v", call, err)
}

func (s *session) ctx(timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), timeout)
}

// release drops the deferred reports.
func (s *session) release() {
	for _, r := range s.pending {
		mlx.Unpin(r.tokens, r.features)
	}
	s.pending, s.pendingRows = nil, 0
}

// Committed defers the rows past the frontier (spec 4.4); a gap panics, as
// in the in-process session.
func (s *session) Committed(tokens, features *mlx.Array, position int) {
	if s.closed || s.fault != "" {
		return
	}
	n := tokens.Dim(1)
	skip := s.frontier - position
	if skip < 0 {
		panic(fmt.Sprintf("plugins: committed run at slot %d leaves slots %d..%d unfed (frontier %d)", position, s.frontier, position-1, s.frontier))
	}
	if skip >= n {
		return
	}
	r := run{tokens: tokens, position: s.frontier}
	if skip > 0 {
		r.tokens = mlx.SliceAxis(tokens, 1, skip, n)
	}
	if s.d.resp.GetNeedsFeatures() {
		if features == nil {
			panic("plugins: committed run without features for a plugin draft that needs them")
		}
		r.features = features
		if skip > 0 {
			r.features = mlx.SliceAxis(features, 1, skip, n)
		}
	}
	mlx.Pin(r.tokens, r.features)
	s.pending = append(s.pending, r)
	s.pendingRows += n - skip
	s.frontier = position + n
	if s.pendingRows >= flushRows {
		s.flush()
	}
}

// flush sends the deferred reports as Committed calls, in pieces whose
// features stay under maxCommittedBytes. It reports whether the session is
// still healthy.
func (s *session) flush() bool {
	if s.fault != "" {
		return false
	}
	if len(s.pending) == 0 {
		return true
	}
	start := s.pending[0].position
	toks := make([]*mlx.Array, len(s.pending))
	var feats []*mlx.Array
	for i, r := range s.pending {
		toks[i] = r.tokens
		if r.features != nil {
			feats = append(feats, r.features)
		}
	}
	var (
		ids   []int32
		ft    *draftv1.Tensor
		width int
		err   error
	)
	err = mlx.Scope(func() error {
		if ids, err = mlx.Concatenate(1, toks...).Int32s(); err != nil {
			return err
		}
		if feats != nil {
			x := mlx.Concatenate(1, feats...)
			width = x.Dim(2)
			if x.DType() != s.d.featureDType {
				x = mlx.AsType(x, s.d.featureDType)
			}
			ft, err = encodeTensor(x)
		}
		return err
	})
	s.release()
	if err != nil {
		s.faultf(nil, "Committed", FaultInvalid, "reading the features to send: %v", err)
		return false
	}
	rows := len(ids)
	step := rows
	if ft != nil {
		rowBytes := len(ft.Data) / rows
		step = max(1, maxCommittedBytes/max(1, rowBytes))
	}
	for lo := 0; lo < rows; lo += step {
		hi := min(rows, lo+step)
		req := &draftv1.CommittedRequest{SessionId: s.id, Position: int64(start + lo), Tokens: ids[lo:hi]}
		if ft != nil {
			rb := len(ft.Data) / rows
			req.Features = &draftv1.Tensor{Dtype: ft.Dtype, Shape: []int64{1, int64(hi - lo), int64(width)}, Data: ft.Data[lo*rb : hi*rb]}
		}
		t := s.d.cfg.timeouts
		ctx, cancel := s.ctx(t.Committed + time.Duration((hi-lo+1023)/1024)*t.CommittedPer1024)
		resp, err := s.proc.rpc.Committed(ctx, req)
		cancel()
		if err != nil {
			s.callFailed("Committed", err)
			return false
		}
		if got, want := resp.GetFrontier(), int64(start+hi); got != want {
			s.faultf(s.proc, "Committed", FaultInvalid, "frontier %d after a run ending at slot %d; the plugin lost track of the context", got, want)
			return false
		}
	}
	return true
}

// Settle sends the deferred reports and asks the plugin to write them.
func (s *session) Settle() {
	if s.closed || !s.flush() {
		return
	}
	ctx, cancel := s.ctx(s.d.cfg.timeouts.Settle)
	defer cancel()
	resp, err := s.proc.rpc.Settle(ctx, &draftv1.SettleRequest{SessionId: s.id})
	if err != nil {
		s.callFailed("Settle", err)
		return
	}
	if resp.GetCtxOffset() != int64(s.frontier) {
		s.faultf(s.proc, "Settle", FaultInvalid, "ctx_offset %d after settling, want the frontier %d", resp.GetCtxOffset(), s.frontier)
	}
}

// Propose asks the plugin for at most max drafts after current and
// validates the answer (spec/plugins.md section 5).
func (s *session) Propose(current *mlx.Array, max int) *speculation.Candidates {
	n := min(max, s.d.Limit())
	if s.closed || s.fault != "" || n <= 0 || s.frontier == 0 {
		return nil
	}
	if !s.flush() {
		return nil
	}
	anchor, err := current.Int32s()
	if err != nil || len(anchor) != 1 {
		panic(fmt.Sprintf("plugins: Propose needs current [1] int32: %v", err))
	}
	o := s.sampler.Options()
	req := &draftv1.ProposeRequest{SessionId: s.id, Anchor: anchor[0], Max: uint32(n),
		Temperature: o.Temperature, TopK: int32(o.TopK), TopP: o.TopP, MinP: o.MinP, Seed: s.seed, Round: s.round}
	s.round++
	ctx, cancel := s.ctx(s.d.cfg.timeouts.Propose)
	resp, err := s.proc.rpc.Propose(ctx, req)
	cancel()
	if err != nil {
		s.callFailed("Propose", err)
		return nil
	}
	if len(resp.GetTokens()) == 0 {
		return nil
	}
	p, err := validateProposal(resp, n, s.d.vocab)
	if err != nil {
		s.faultf(s.proc, "Propose", FaultInvalid, "invalid proposal: %v", err)
		return nil
	}
	return p.candidates()
}

// Close ends the session in the plugin (which settles and frees it); a
// second Close is a no-op. A failed Close is logged; the request is over.
func (s *session) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.release()
	if s.fault != "" || s.proc == nil {
		return
	}
	ctx, cancel := s.ctx(s.d.cfg.timeouts.Close)
	defer cancel()
	if _, err := s.proc.rpc.Close(ctx, &draftv1.CloseRequest{SessionId: s.id}); err != nil {
		s.callFailed("Close", err)
	}
}
