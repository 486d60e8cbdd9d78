package engine_test

import (
	"cmp"
	"context"
	"math"
	"slices"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/speculation"
)

// The Qwen3.5 MoE target through the whole engine: plain greedy decoding
// gives transformers' tokens, and speculation over it is exact, greedy and
// sampled.

func TestMoEPlainGreedyMatchesFixture(t *testing.T) {
	for _, target := range []string{"qwen35moe-tiny", "qwen35moe-tiny-vl"} {
		t.Run(target, func(t *testing.T) { plainGreedyMatchesFixture(t, target) })
	}
}

// Speculative greedy output equals plain greedy output over the MoE target
// with DFlash and DFlash2 drafts: the random drafts made for it and the
// dense fixture's (whose shapes fit it too). Random drafts are nearly always
// rejected; TestMoEPartialAcceptance covers verifications that commit part
// of their rows.
func TestMoESpeculativeGreedyEqualsPlain(t *testing.T) {
	speculativeGreedyEqualsPlain(t, "qwen35moe-tiny", "dflash-moe-tiny", "dflash2-moe-tiny", "dflash-tiny", "dflash2-tiny")
}

// A drafter that proposes the target's greedy continuation with every
// fourth token wrong: rounds accept some drafts and reject the rest, so
// multi-row verification forwards of the MoE target commit part of their
// rows and roll the rest back. The output is still the plain greedy one.
func TestMoEPartialAcceptance(t *testing.T) {
	ref := loadReference(t, "qwen35moe-tiny")
	e := load(t, writeManifestFor(t, "qwen35moe-tiny", "", ""))
	for i := range 6 {
		prompt := ref.PromptIDs[i : 12+2*i]
		want, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 32}, nil)
		if err != nil {
			t.Fatal(err)
		}
		noisy := slices.Concat(prompt, want.IDs)
		for j := len(prompt) + 2 + i%3; j < len(noisy); j += 4 {
			noisy[j] = (noisy[j] + 1) % 512
		}
		before := e.Totals()
		got, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 32, Drafter: speculation.NewOracle(noisy, 7), FixedDepth: 7}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.IDs, want.IDs) {
			t.Fatalf("prompt %d: speculative %v, plain %v", i, got.IDs, want.IDs)
		}
		after := e.Totals()
		drafted, accepted := after.Drafted-before.Drafted, after.Accepted-before.Accepted
		if accepted == 0 || accepted == drafted {
			t.Fatalf("prompt %d: %d of %d drafts accepted; want a part", i, accepted, drafted)
		}
		t.Logf("prompt %d: %d of %d drafts accepted in %d rounds", i, accepted, drafted, after.DraftRounds-before.DraftRounds)
	}
}

// Sampling settings that leave one candidate give the greedy tokens,
// plainly and speculatively, and seeded sampling is reproducible, as for
// the dense target.
func TestMoEDegenerateSamplingEqualsGreedy(t *testing.T) {
	degenerateSamplingEqualsGreedy(t, "qwen35moe-tiny", "dflash-moe-tiny", "dflash2-moe-tiny")
}

func TestMoESeededSamplingIsReproducible(t *testing.T) {
	seededSamplingIsReproducible(t, "qwen35moe-tiny", "dflash-moe-tiny")
}

// Sampled speculative output follows the MoE target's distribution: the
// first two tokens of many seeded requests (temperature 1, top-k 4) against
// the target's own probabilities p(a)·p(b | a), computed from its logits on
// the host, by a chi-square test at p = 0.001. The drafter proposes the
// target's two most probable tokens (one-hot), so a round accepts both,
// the first only, or neither (the residual is then sampled): every path of
// the acceptance rule runs through real MoE verification forwards.
func TestMoESampledSpeculativeFollowsTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test: slow in -short mode")
	}
	const topK, requests = 4, 800
	ref := loadReference(t, "qwen35moe-tiny")
	prompt := ref.PromptIDs[:8]
	f := qwen35test.Load(t, "qwen35moe-tiny")

	// The target's top-k distribution after the prompt, and after the
	// prompt and each of its top-k tokens.
	type dist struct {
		ids   []int32
		probs []float64
	}
	topk := func(logits []float32) dist {
		order := make([]int32, len(logits))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(logits[b], logits[a]) })
		d := dist{ids: order[:topK]}
		var z float64
		for _, id := range d.ids {
			p := math.Exp(float64(logits[id] - logits[order[0]]))
			d.probs = append(d.probs, p)
			z += p
		}
		for i := range d.probs {
			d.probs[i] /= z
		}
		return d
	}
	var first dist
	next := map[int32]dist{}
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := f.Target(t, nil)
		defer m.(interface{ Free() }).Free()
		last := func(ids []int32) []float32 {
			caches := m.NewCaches()
			defer qwen35test.FreeCaches(caches)
			logits, _ := qwen35test.Step(m, caches, ids)
			return t.Float32s(qwen35test.Rows(logits, len(ids)-1, len(ids)))
		}
		first = topk(last(prompt))
		for _, a := range first.ids {
			next[a] = topk(last(append(slices.Clone(prompt), a)))
		}
	})
	a0 := first.ids[0]
	proposal := slices.Concat(prompt, []int32{a0, next[a0].ids[0]})

	e := load(t, writeManifestFor(t, "qwen35moe-tiny", "", ""))
	temp, k := float32(1), topK
	counts := map[[2]int32]float64{}
	for i := range requests {
		seed := uint64(1000 + i)
		resp, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 3, Temperature: &temp, TopK: &k, Seed: &seed,
			Drafter: speculation.NewOracle(proposal, 2), FixedDepth: 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.IDs) != 3 {
			t.Fatalf("request %d emitted %v", i, resp.IDs)
		}
		counts[[2]int32{resp.IDs[0], resp.IDs[1]}]++
	}
	st := e.Totals()
	if st.Accepted == 0 || st.Accepted == st.Drafted {
		t.Fatalf("%d of %d drafts accepted over %d requests: the test would not exercise both acceptance and rejection", st.Accepted, st.Drafted, requests)
	}

	var chi2, seen float64
	cells := 0
	for i, a := range first.ids {
		for j, b := range next[a].ids {
			want := requests * first.probs[i] * next[a].probs[j]
			got := counts[[2]int32{a, b}]
			seen += got
			if want < 5 {
				continue
			}
			chi2 += (got - want) * (got - want) / want
			cells++
		}
	}
	if seen != requests {
		t.Fatalf("%v of %d requests began with a pair outside the target's top-%d tokens", requests-seen, requests, topK)
	}
	// Wilson–Hilferty approximation of chi-square's upper 0.001 quantile.
	df := float64(cells - 1)
	h := 2 / (9 * df)
	crit := df * math.Pow(1-h+3.09*math.Sqrt(h), 3)
	if chi2 > crit {
		t.Fatalf("chi-square %.1f over %d cells exceeds %.1f (p = 0.001)", chi2, cells, crit)
	}
	t.Logf("chi-square %.1f over %d cells (critical %.1f); %d of %d drafts accepted", chi2, cells, crit, st.Accepted, st.Drafted)
}
