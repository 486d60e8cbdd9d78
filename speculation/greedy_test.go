package speculation

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// At temperature 0 the verdict comes from comparing ids (greedyVerdict):
// it must equal the general acceptance rule's (u·q < p, residual draws,
// bonus draw) for every kind of proposal distribution — one-hot (a greedy
// draft), dense, sparse top-k, and one that puts no mass on its own draft —
// on rows with tied logits, and leave the sampler's later keys where the
// general path leaves them.
func TestGreedyVerdictMatchesGeneral(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := rand.New(rand.NewPCG(7, 11))
		const vocab = 40
		for trial := range 60 {
			n := 1 + trial%7
			logits := make([]float32, (n+1)*vocab)
			for i := range logits {
				logits[i] = float32(r.NormFloat64())
			}
			argmax := make([]int32, n+1)
			for row := range n + 1 {
				x := logits[row*vocab : (row+1)*vocab]
				if row%3 == 1 { // a tie: the lowest id is the choice
					a, b := r.IntN(vocab), r.IntN(vocab)
					x[a], x[b] = 9, 9
				}
				argmax[row] = int32(slices.Index(x, slices.Max(x)))
			}
			drafts := make([]int32, n)
			for i := range drafts {
				switch r.IntN(3) {
				case 0, 1:
					drafts[i] = argmax[i]
				default:
					drafts[i] = int32(r.IntN(vocab))
				}
			}
			dm := mlx.FromInt32s(drafts, n)
			for kind := range 4 {
				q := proposal(r, kind, drafts, argmax, vocab)
				general := sample.New(sample.Options{Temperature: 0, Seed: 5, UseSeed: true}, nil)
				greedy := sample.New(sample.Options{Temperature: 0, Seed: 5, UseSeed: true}, nil)
				lm := mlx.FromFloat32s(logits, n+1, vocab)

				p := general.Distribution(lm, dm)
				pd := p.Slice(0, n)
				u := general.Uniform(n)
				flags := mlx.Less(mlx.Multiply(u, sample.Prob(q, dm)), sample.Prob(pd, dm))
				res := general.SampleDistribution(sample.Residual(pd, q))
				bonus := general.SampleDistribution(p.Slice(n, n+1))
				want, err := outcome(flags, dm, res, bonus).Int32s()
				if err != nil {
					t.Fatal(err)
				}

				gf, gr, gb := greedyVerdict(greedy.Distribution(lm, dm), dm, n)
				greedy.Skip(3)
				got, err := outcome(gf, dm, gr, gb).Int32s()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("trial %d, proposal kind %d, drafts %v (target's choices %v): greedy verdict %v, general %v", trial, kind, drafts, argmax, got, want)
				}
				a, b := t.Float32s(general.Uniform(2)), t.Float32s(greedy.Uniform(2))
				if !slices.Equal(a, b) {
					t.Fatalf("trial %d: the next draws differ after the two paths: %v and %v", trial, b, a)
				}
			}
		}
	})
}

// proposal builds a draft distribution over vocab for each drafted row:
// kind 0 one-hot at the draft, 1 dense and random, 2 sparse over 4 ids
// holding the draft, 3 one-hot at the target's choice (no mass on the draft).
func proposal(r *rand.Rand, kind int, drafts, argmax []int32, vocab int) sample.Distribution {
	n := len(drafts)
	switch kind {
	case 0, 3:
		ids := slices.Clone(drafts)
		if kind == 3 {
			ids = slices.Clone(argmax[:n])
		}
		ones := make([]float32, n)
		for i := range ones {
			ones[i] = 1
		}
		return sample.Distribution{IDs: mlx.FromInt32s(ids, n, 1), Probs: mlx.FromFloat32s(ones, n, 1)}
	case 1:
		return sample.Distribution{Probs: mlx.FromFloat32s(randomRows(r, n, vocab), n, vocab)}
	default:
		ids := make([]int32, n*4)
		for row := range n {
			ids[row*4] = drafts[row]
			for j := 1; j < 4; j++ {
				ids[row*4+j] = int32((int(drafts[row]) + j*7) % vocab)
			}
		}
		return sample.Distribution{IDs: mlx.FromInt32s(ids, n, 4), Probs: mlx.FromFloat32s(randomRows(r, n, 4), n, 4)}
	}
}

// randomRows returns rows × width positive probabilities, each row summing to 1.
func randomRows(r *rand.Rand, rows, width int) []float32 {
	probs := make([]float32, rows*width)
	for row := range rows {
		p := probs[row*width : (row+1)*width]
		var sum float32
		for j := range p {
			p[j] = r.Float32() + 1e-3
			sum += p[j]
		}
		for j := range p {
			p[j] /= sum
		}
	}
	return probs
}
