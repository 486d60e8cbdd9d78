package speculation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// chainRun decodes prompt with an oracle drafter over seq at a pinned
// depth and returns the tokens, the stats and what the target cache holds
// once the decoder is closed.
func chainRun(t *mlxtest.T, target [][]float32, prompt, seq []int32, depth, budget int, opts sample.Options, noPipeline bool, eos ...int32) (Result, *Stats, []int32) {
	t.Helper()
	return chainRunConfig(t, Config{Target: &markovTarget{table: target}, EOS: eos, NoPipeline: noPipeline}, prompt, seq, depth, budget, opts)
}

// chainRunConfig is chainRun with the core's other settings in cfg.
func chainRunConfig(t *mlxtest.T, cfg Config, prompt, seq []int32, depth, budget int, opts sample.Options) (Result, *Stats, []int32) {
	t.Helper()
	caches := newCaches()
	cfg.TargetCaches = caches[:1]
	if seq != nil {
		cfg.Drafter, cfg.FixedDepth = NewOracle(seq, depth), depth
	}
	s := NewCore(cfg).Open(Request{Sampler: sample.New(opts, prompt), NoDraft: seq == nil})
	seed, pos, err := s.Prefill(context.Background(), prompt)
	t.NoErr(err)
	d := s.Decoder(seed, pos)
	res, err := Run(context.Background(), d, budget, func(int32) error { return nil })
	t.NoErr(err)
	// Run has dropped any chained round: the cache holds the prompt and
	// what Result says was decoded, the last token possibly not yet.
	all := slices.Concat(prompt, res.Tokens, res.Rest)
	if got := streamOf(caches[0]); len(got) < len(all)-1 || !slices.Equal(got, all[:len(got)]) {
		t.Fatalf("after Run the target cache holds %v, want %v or all but its last token", got, all)
	}
	d.Close()
	s.Close()
	return res, s.Stats(), slices.Clone(streamOf(caches[0]))
}

// plainSeq decodes budget tokens plainly (greedy unless opts say
// otherwise) and returns the result and the prompt followed by it: what a
// perfect oracle proposes.
func plainSeq(t *mlxtest.T, target [][]float32, prompt []int32, budget int, opts sample.Options) (Result, []int32) {
	t.Helper()
	res, _, _ := chainRun(t, target, prompt, nil, 0, budget, opts, false)
	return res, slices.Concat(prompt, res.Tokens)
}

// noisy returns seq with the tokens after the prompt changed where wrong
// says so: the oracle then proposes the target's continuation with those
// drafts wrong.
func noisy(seq []int32, prompt, vocab int, wrong func(i int) bool) []int32 {
	out := slices.Clone(seq)
	for i := prompt; i < len(out); i++ {
		if wrong(i - prompt) {
			out[i] = (out[i] + 1) % int32(vocab)
		}
	}
	return out
}

// Chained rounds (each verified before the previous verdict is read, on the
// guess that it passes every draft) give the target's own greedy output,
// and leave the target cache holding the prompt and the output (chainRun
// checks it), whether
// the guesses hold (a perfect oracle), fail now and then or fail often, at
// every depth and budget, with EOS tokens ending the run inside a round or
// as a chained round's first token. Decoding without the pipeline, which
// never chains, gives the same.
func TestChainedRoundsEqualPlain(t *testing.T) {
	const vocab = 12
	target, _ := markovPair(7, vocab, 0, 3)
	r := rand.New(rand.NewPCG(3, 4))
	noise := map[string]func(i int) bool{
		"perfect":       func(int) bool { return false },
		"every 5th":     func(i int) bool { return i%5 == 3 },
		"every 2nd":     func(i int) bool { return i%2 == 1 },
		"random 30%":    func(int) bool { return r.Float64() < 0.3 },
		"first 3 wrong": func(i int) bool { return i < 3 },
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		var chained, dropped, perfectDropped int
		for _, prompt := range [][]int32{{4}, {1, 9, 2}} {
			for _, eos := range [][]int32{nil, {5}, {2, 7}} {
				want, _, _ := chainRun(t, target, prompt, nil, 0, 48, sample.Options{}, false, eos...)
				seq := slices.Concat(prompt, want.Tokens, want.Rest)
				for name, wrong := range noise {
					drafts := noisy(seq, len(prompt), vocab, wrong)
					for _, depth := range []int{1, 3, 7} {
						for _, budget := range []int{1, 2, 5, 9, 23, 48} {
							ref, _, _ := chainRun(t, target, prompt, nil, 0, budget, sample.Options{}, false, eos...)
							for _, noPipeline := range []bool{false, true} {
								label := fmt.Sprintf("prompt %v, eos %v, %s oracle, depth %d, budget %d, no pipeline %v", prompt, eos, name, depth, budget, noPipeline)
								got, st, _ := chainRun(t, target, prompt, drafts, depth, budget, sample.Options{}, noPipeline, eos...)
								if !slices.Equal(got.Tokens, ref.Tokens) || got.Reason != ref.Reason {
									t.Fatalf("%s: %v (%s), plain %v (%s)", label, got.Tokens, got.Reason, ref.Tokens, ref.Reason)
								}
								if noPipeline && st.ChainedRounds != 0 {
									t.Fatalf("%s: %d chained rounds without the pipeline", label, st.ChainedRounds)
								}
								if st.ChainedDropped > st.ChainedRounds {
									t.Fatalf("%s: %d chained rounds dropped of %d", label, st.ChainedDropped, st.ChainedRounds)
								}
								chained += st.ChainedRounds
								dropped += st.ChainedDropped
								if name == "perfect" && eos == nil {
									perfectDropped += st.ChainedDropped
								}
							}
						}
					}
				}
			}
		}
		if chained == 0 || dropped == 0 || dropped == chained {
			t.Fatalf("%d chained rounds, %d dropped: the test must see chained rounds both kept and dropped", chained, dropped)
		}
		if perfectDropped != 0 {
			t.Fatalf("a perfect oracle without EOS tokens had %d chained rounds dropped, want none", perfectDropped)
		}
		t.Logf("%d chained rounds, %d dropped", chained, dropped)
	})
}

// With a perfect oracle every round after the first is chained while the
// budget leaves room for another drafting round.
func TestPerfectOracleChainsEveryRound(t *testing.T) {
	onChainTarget(t, func(t *mlxtest.T, target [][]float32, prompt []int32) {
		_, seq := plainSeq(t, target, prompt, 64, sample.Options{})
		// Depth 3 and a budget of 64: rounds of 4 tokens, the last of which
		// leaves no budget for another.
		_, st, _ := chainRun(t, target, prompt, seq, 3, 64, sample.Options{}, false)
		if st.DraftRounds != 16 || st.ChainedRounds != 15 || st.ChainedDropped != 0 {
			t.Fatalf("%d drafting rounds, %d chained, %d dropped; want 16, 15 and 0", st.DraftRounds, st.ChainedRounds, st.ChainedDropped)
		}
	})
}

// Config.NoChain turns chaining alone off: the same output, no chained
// round, the rest of the pipeline (the early proposal) still on.
func TestNoChainConfig(t *testing.T) {
	onChainTarget(t, func(t *mlxtest.T, target [][]float32, prompt []int32) {
		want, seq := plainSeq(t, target, prompt, 32, sample.Options{})
		got, st, _ := chainRunConfig(t, Config{Target: &markovTarget{table: target}, NoChain: true}, prompt, seq, 3, 32, sample.Options{})
		if !slices.Equal(got.Tokens, want.Tokens) || st.DraftRounds == 0 || st.ChainedRounds != 0 {
			t.Fatalf("%v in %d drafting rounds, %d chained; want %v, some rounds, none chained", got.Tokens, st.DraftRounds, st.ChainedRounds, want.Tokens)
		}
	})
}

// Rounds are not chained where the guess cannot be checked without the
// host: a sampled request's bonus is a draw, and with a penalty the next
// distributions depend on the tokens the verdict emits.
func TestNoChainWhenSamplingOrPenalised(t *testing.T) {
	onChainTarget(t, func(t *mlxtest.T, target [][]float32, prompt []int32) {
		for _, opts := range []sample.Options{
			{Temperature: 0.7, UseSeed: true, Seed: 9},
			{RepeatPenalty: 1.2, RepeatLastN: 16},
		} {
			want, seq := plainSeq(t, target, prompt, 32, opts)
			got, st, _ := chainRun(t, target, prompt, seq, 3, 32, opts, false)
			if st.DraftRounds == 0 || st.ChainedRounds != 0 {
				t.Fatalf("%+v: %d drafting rounds, %d chained; want some and none", opts, st.DraftRounds, st.ChainedRounds)
			}
			if opts.Temperature == 0 && !slices.Equal(got.Tokens, want.Tokens) {
				t.Fatalf("%+v: %v, plain %v", opts, got.Tokens, want.Tokens)
			}
		}
	})
}

// An EOS as the bonus of a round ends the run after that round's tokens
// while the round chained on it (which begins with that EOS) is in flight:
// Run drops it, and the target cache holds no slot of it.
func TestChainedRoundAfterEOSIsDropped(t *testing.T) {
	onChainTarget(t, func(t *mlxtest.T, target [][]float32, prompt []int32) {
		free, seq := plainSeq(t, target, prompt, 64, sample.Options{})
		seen := 0
		for _, depth := range []int{1, 2, 3} {
			// A perfect oracle at this depth emits depth+1 tokens a round,
			// the last of them the bonus: find a token whose first
			// occurrence is the bonus of a round after the first.
			for i := 2*(depth+1) - 1; i < len(free.Tokens); i += depth + 1 {
				eos := free.Tokens[i]
				if slices.Index(free.Tokens, eos) != i {
					continue
				}
				seen++
				got, st, _ := chainRun(t, target, prompt, seq, depth, 64, sample.Options{}, false, eos)
				if !slices.Equal(got.Tokens, free.Tokens[:i+1]) || got.Reason != DoneStop {
					t.Fatalf("depth %d, EOS %d: %v (%s), want %v (stop)", depth, eos, got.Tokens, got.Reason, free.Tokens[:i+1])
				}
				if st.ChainedDropped != 1 {
					t.Fatalf("depth %d, EOS %d: %d chained rounds dropped, want the one after the EOS", depth, eos, st.ChainedDropped)
				}
				break
			}
		}
		if seen == 0 {
			t.Fatalf("no token of %v first occurs as a round's bonus: pick another target", free.Tokens)
		}
	})
}

// A run cancelled while a chained round is in flight returns with that
// round dropped: the target cache holds the prompt and the emitted tokens,
// the last possibly not yet, and nothing of the chained round.
func TestCancelledRunDropsChainedRound(t *testing.T) {
	onChainTarget(t, func(t *mlxtest.T, target [][]float32, prompt []int32) {
		want, seq := plainSeq(t, target, prompt, 40, sample.Options{})
		for _, stopAfter := range []int{1, 4, 9, 17} {
			caches := newCaches()
			s := NewCore(Config{Target: &markovTarget{table: target}, TargetCaches: caches[:1], Drafter: NewOracle(seq, 3), FixedDepth: 3}).
				Open(Request{Sampler: sample.New(sample.Options{}, prompt)})
			seed, pos, err := s.Prefill(context.Background(), prompt)
			t.NoErr(err)
			d := s.Decoder(seed, pos)
			ctx, cancel := context.WithCancel(context.Background())
			emitted := 0
			res, err := Run(ctx, d, 40, func(int32) error {
				if emitted++; emitted == stopAfter {
					cancel()
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("stop after %d: Run returned %v, want context.Canceled", stopAfter, err)
			}
			if n := len(res.Tokens); n < stopAfter || n >= len(want.Tokens) || !slices.Equal(res.Tokens, want.Tokens[:n]) {
				t.Fatalf("stop after %d: %v, want a prefix of %v at least %d long", stopAfter, res.Tokens, want.Tokens, stopAfter)
			}
			all := slices.Concat(prompt, res.Tokens)
			if got := streamOf(caches[0]); len(got) < len(all)-1 || len(got) > len(all) || !slices.Equal(got, all[:len(got)]) {
				t.Fatalf("stop after %d: the target cache holds %v, want %v or all but its last token", stopAfter, got, all)
			}
			if st := s.Stats(); st.ChainedRounds == 0 || st.ChainedDropped != 1 {
				t.Fatalf("stop after %d: %d chained rounds, %d dropped; want some, and the one in flight dropped", stopAfter, st.ChainedRounds, st.ChainedDropped)
			}
			d.Close()
			s.Close()
			cancel()
		}
	})
}

// onChainTarget runs f on MLX's worker with the Markov target the chain
// tests share (seed 7, 12 tokens) and their prompt.
func onChainTarget(t *testing.T, f func(t *mlxtest.T, target [][]float32, prompt []int32)) {
	target, _ := markovPair(7, 12, 0, 3)
	mlxtest.Run(t, func(t *mlxtest.T) { f(t, target, []int32{1, 9, 2}) })
}
