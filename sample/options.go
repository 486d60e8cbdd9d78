// Package sample turns a model's logits into the probability distributions
// and random draws that decoding and speculative verification need
// (spec/speculation.md 2.2, 6.3–6.5, 8.3): repetition penalties, temperature,
// top-k, top-p and min-p; probability lookup and the acceptance residual over
// dense and sparse layouts; the selector's Choose callback; and a seeded
// sequence of random keys.
//
// Every function that takes or returns an *mlx.Array only builds lazy graph:
// nothing here evaluates or reads array values back to the host, so a caller
// can build a whole verification round and evaluate it once. Such functions
// must run on the MLX worker (see package mlx). A Sampler is not safe for
// concurrent use; one request owns one Sampler.
package sample

// Options are a request's sampling settings. The zero value is greedy
// decoding without penalties.
type Options struct {
	// Temperature divides the logits before the softmax; <= 0 selects greedy
	// decoding (the argmax, lowest id on ties).
	Temperature float32
	// TopK restricts sampling to the TopK most likely ids, giving a sparse
	// Distribution; <= 0, or >= the vocabulary size, turns it off.
	TopK int
	// TopP keeps an id while the probability mass of the ids strictly more
	// likely than it is below TopP; 0 or >= 1 turns it off.
	TopP float32
	// MinP drops ids whose probability is below MinP times the best id's;
	// 0 turns it off.
	MinP float32
	// RepeatPenalty divides the positive logits (and multiplies the negative
	// ones) of every distinct id in the penalty window; 0 or 1 turns it off.
	RepeatPenalty float32
	// PresencePenalty is subtracted once from the logit of every distinct id
	// in the penalty window; 0 turns it off.
	PresencePenalty float32
	// FrequencyPenalty is subtracted from an id's logit once per occurrence
	// in the penalty window; 0 turns it off.
	FrequencyPenalty float32
	// RepeatLastN is the penalty window in tokens: 0 turns all penalties
	// off, a negative value (-1 by convention) means the whole context.
	RepeatLastN int
	// Seed makes the request's draws reproducible when UseSeed is set.
	Seed uint64
	// UseSeed selects Seed; otherwise the sampler seeds itself from
	// crypto/rand.
	UseSeed bool
}

// greedy reports whether decoding takes the argmax.
func (o Options) greedy() bool { return o.Temperature <= 0 }

// repeatOn reports whether the multiplicative repeat penalty applies.
func (o Options) repeatOn() bool { return o.RepeatPenalty != 0 && o.RepeatPenalty != 1 }

// penalised reports whether any penalty applies (spec 6.3 step 1).
func (o Options) penalised() bool {
	return o.RepeatLastN != 0 && (o.repeatOn() || o.PresencePenalty != 0 || o.FrequencyPenalty != 0)
}

// topKOn reports whether top-k restricts a vocabulary of the given size.
func (o Options) topKOn(vocab int) bool { return o.TopK > 0 && o.TopK < vocab }

// topPOn reports whether top-p truncation applies.
func (o Options) topPOn() bool { return o.TopP > 0 && o.TopP < 1 }

// minPOn reports whether min-p truncation applies.
func (o Options) minPOn() bool { return o.MinP > 0 }
