package sdk

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/specula-dev/specula/plugins/internal/wire"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
)

// tokenLoaded serves a token-level Proposer.
type tokenLoaded struct {
	name     string // the architecture
	p        Proposer
	maxDepth int
	vocab    int

	// log receives the warnings about proposals that break the Proposer
	// contract, each kind once per loaded draft (a proposer gets it wrong
	// every round); nil until the server sets it.
	log                 *slog.Logger
	warnedID, warnedLen atomic.Bool
}

// warnOnce logs a broken proposal the first time flag is unset.
func (t *tokenLoaded) warnOnce(flag *atomic.Bool, msg string, args ...any) {
	if t.log != nil && flag.CompareAndSwap(false, true) {
		t.log.Warn(fmt.Sprintf("architecture %s: Propose %s (reported once)", t.name, fmt.Sprintf(msg, args...)))
	}
}

func (t *tokenLoaded) response() *draftv1.LoadResponse {
	return &draftv1.LoadResponse{
		BlockSize: uint32(t.maxDepth + 1),
		MaxDepth:  uint32(t.maxDepth),
		Dist:      &draftv1.DistInfo{Kind: draftv1.DistKind_DIST_KIND_SPARSE, Width: 1},
	}
}

func (t *tokenLoaded) open() (session, error) { return &tokenSession{t: t}, nil }

func (t *tokenLoaded) free() {}

// tokenSession keeps the committed token stream; the context of a proposal
// is that stream (spec/speculation.md 4.4: tokens exist for token-level
// drafts).
type tokenSession struct {
	t       *tokenLoaded
	history []int32 // the token at each slot 0 … frontier−1
}

func (s *tokenSession) committed(position int64, tokens []int32, _ *draftv1.Tensor) (int64, error) {
	frontier := int64(len(s.history))
	if position < 0 || position > frontier {
		return 0, protoErrorf("committed run at slot %d leaves slots %d..%d unfed (frontier %d)", position, frontier, position-1, frontier)
	}
	if skip := frontier - position; skip < int64(len(tokens)) {
		s.history = append(s.history, tokens[skip:]...)
	}
	return int64(len(s.history)), nil
}

func (s *tokenSession) settle() (int64, error) { return int64(len(s.history)), nil }

func (s *tokenSession) propose(req *draftv1.ProposeRequest) (*draftv1.ProposeResponse, error) {
	n := min(int(req.GetMax()), s.t.maxDepth)
	if n <= 0 || len(s.history) == 0 {
		return &draftv1.ProposeResponse{}, nil
	}
	// The host would refuse the whole proposal; the SDK keeps what comes
	// before the first bad id and tells the author.
	var out []int32
	got := s.t.p.Propose(s.history, req.GetAnchor(), n)
	if len(got) > n {
		s.t.warnOnce(&s.t.warnedLen, "returned %d tokens, more than the %d asked for; the rest are dropped", len(got), n)
	}
	for _, tok := range got {
		if len(out) == n {
			break
		}
		if tok < 0 || (s.t.vocab > 0 && int(tok) >= s.t.vocab) {
			s.t.warnOnce(&s.t.warnedID, "returned token %d, outside the target's vocabulary [0, %d); the proposal is cut before it", tok, s.t.vocab)
			break
		}
		out = append(out, tok)
	}
	if len(out) == 0 {
		return &draftv1.ProposeResponse{}, nil
	}
	probs := make([]float32, len(out))
	for i := range probs {
		probs[i] = 1
	}
	return &draftv1.ProposeResponse{
		Tokens: out,
		Dist:   &draftv1.Distribution{Rows: uint32(len(out)), Width: 1, Ids: out, Probs: wire.Float32Bytes(probs)},
	}, nil
}

func (s *tokenSession) close() error { return nil }
