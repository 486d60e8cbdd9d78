package plugins

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/plugins/internal/wire"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// rowSumTolerance is how far a proposal row may sum from 1 before it is
// rejected (float32 softmax over a large vocabulary drifts by ~1e-5).
const rowSumTolerance = 1e-3

// proposal is a validated, renormalised proposal.
type proposal struct {
	tokens []int32
	ids    []int32 // nil when dense
	probs  []float32
	width  int
}

// validateProposal checks a Propose answer (spec/plugins.md section 5): at
// most max tokens; one distribution row per token; a dense row spans the
// vocabulary, a sparse one has 1 … V ids; every token and id is in the
// vocabulary; every probability is finite and non-negative; each row sums
// to 1 within rowSumTolerance (then it is renormalised); each drafted token
// has a positive probability in its own row.
func validateProposal(r *draftv1.ProposeResponse, max, vocab int) (*proposal, error) {
	toks := r.GetTokens()
	n := len(toks)
	d := r.GetDist()
	switch {
	case n > max:
		return nil, fmt.Errorf("%d tokens, at most %d were asked for", n, max)
	case d == nil:
		return nil, fmt.Errorf("%d tokens without a distribution", n)
	case int(d.GetRows()) != n:
		return nil, fmt.Errorf("distribution has %d rows for %d tokens", d.GetRows(), n)
	}
	w := int(d.GetWidth())
	if d.GetDense() {
		if w != vocab {
			return nil, fmt.Errorf("dense distribution of width %d, want the vocabulary size %d", w, vocab)
		}
		if len(d.GetIds()) != 0 {
			return nil, fmt.Errorf("dense distribution with %d ids", len(d.GetIds()))
		}
	} else {
		if w < 1 || w > vocab {
			return nil, fmt.Errorf("sparse distribution of width %d, want 1 … %d", w, vocab)
		}
		if len(d.GetIds()) != n*w {
			return nil, fmt.Errorf("sparse distribution with %d ids, want %d rows × %d", len(d.GetIds()), n, w)
		}
	}
	for i, t := range toks {
		if t < 0 || int(t) >= vocab {
			return nil, fmt.Errorf("token %d (position %d) is outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	for i, id := range d.GetIds() {
		if id < 0 || int(id) >= vocab {
			return nil, fmt.Errorf("id %d (row %d) is outside the vocabulary [0, %d)", id, i/w, vocab)
		}
	}
	if len(d.GetProbs()) != 4*n*w {
		return nil, fmt.Errorf("%d probability bytes, want 4 × %d rows × %d", len(d.GetProbs()), n, w)
	}
	probs := wire.BytesFloat32(d.GetProbs())
	for r := range n {
		row := probs[r*w : (r+1)*w]
		var sum float64
		for j, p := range row {
			if math.IsNaN(float64(p)) || math.IsInf(float64(p), 0) || p < 0 {
				return nil, fmt.Errorf("row %d entry %d has probability %v", r, j, p)
			}
			sum += float64(p)
		}
		if math.Abs(sum-1) > rowSumTolerance {
			return nil, fmt.Errorf("row %d sums to %.6g, want 1 within %g", r, sum, rowSumTolerance)
		}
		var q float64
		for j := range row {
			row[j] = float32(float64(row[j]) / sum)
			if (d.GetDense() && j == int(toks[r])) || (!d.GetDense() && d.GetIds()[r*w+j] == toks[r]) {
				q += float64(row[j])
			}
		}
		if q <= 0 {
			return nil, fmt.Errorf("drafted token %d has probability 0 in its own row %d", toks[r], r)
		}
	}
	p := &proposal{tokens: toks, probs: probs, width: w}
	if !d.GetDense() {
		p.ids = d.GetIds()
	}
	return p, nil
}

// candidates builds the proposal's arrays (on the MLX worker).
func (p *proposal) candidates() *speculation.Candidates {
	n := len(p.tokens)
	dist := sample.Distribution{Probs: mlx.FromFloat32s(p.probs, n, p.width)}
	if p.ids != nil {
		dist.IDs = mlx.FromInt32s(p.ids, n, p.width)
	}
	return &speculation.Candidates{Tokens: mlx.FromInt32s(p.tokens, 1, n), Dist: dist}
}

// encodeTensor reads x into its wire form.
func encodeTensor(x *mlx.Array) (*draftv1.Tensor, error) { return wire.Encode(x) }

// ValidateProposal checks a Propose answer for a request of at most max
// tokens over a vocabulary of vocab ids, as the host does before verifying
// it (spec/plugins.md section 5). The conformance kit uses it.
func ValidateProposal(r *draftv1.ProposeResponse, max, vocab int) error {
	_, err := validateProposal(proto.Clone(r).(*draftv1.ProposeResponse), max, vocab)
	return err
}
