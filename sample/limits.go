package sample

import (
	"math"
	"strconv"
	"strings"
)

// The Check functions are the valid ranges of a request's generation
// settings, written once and used wherever a user gives one: a manifest's
// [sampling] table, the command line's flags and the HTTP APIs' request
// fields. Each returns nil or a *FieldError whose Field is the setting's
// name as manifests spell it. A value they accept has one meaning, the same
// for speculative and plain decoding (the sampler's behaviour outside these
// ranges — a NaN temperature, an empty support after min-p — would not be).

// FieldError is a setting outside its valid range. Field is the setting's
// name as manifests spell it ("temperature", "top_k", "top_p", "min_p",
// "repeat_penalty", "presence_penalty", "frequency_penalty",
// "repeat_last_n", "max_tokens", "stop"); a caller that spells it
// differently (the flag --top-p, ollama's num_predict) maps Field to its own
// name and words its message with Reason(name).
type FieldError struct {
	// Field is the setting's name as manifests spell it.
	Field string
	// Value is the offending value as text (a quoted string for a stop
	// string).
	Value string
	// reason completes "<name> = <value> ..." with {name} standing for the
	// setting's name.
	reason string
}

// Error returns "<field> = <value> <reason>", e.g. "top_p = 2 is out of
// range: want 0 < top_p <= 1 (1 disables top-p)".
func (e *FieldError) Error() string {
	return e.Field + " = " + e.Value + " " + e.Reason(e.Field)
}

// Reason says what is wrong with the value and what range is valid,
// calling the setting name: "is out of range: want 0 < top-p <= 1 (1
// disables top-p)" for name "top-p".
func (e *FieldError) Reason(name string) string {
	return strings.ReplaceAll(e.reason, "{name}", name)
}

// Valid ranges, in the words every message uses ({name}: the setting's name).
const (
	wantTemperature   = ">= 0 (0 is greedy)"
	wantTopK          = ">= 0 (0 disables top-k)"
	wantTopP          = "0 < {name} <= 1 (1 disables top-p)"
	wantMinP          = "0 <= {name} <= 1 (0 disables min-p)"
	wantRepeatPenalty = "> 0 (1 disables it)"
	wantRepeatLastN   = ">= -1 (-1 = the whole context, 0 disables penalties)"
	wantMaxTokens     = ">= 1, or -1 to generate until a stop or the end of the context"
	// maxCount bounds the integer settings: larger values have no use and
	// would not fit the int32 arithmetic of the caches.
	maxCount = math.MaxInt32
)

// MaxTokensUntilDone is the max_tokens value that generates until a stop
// (EOS, a stop id or string) or the end of the target's context
// (max_position_embeddings), like ollama's num_predict = -1.
const MaxTokensUntilDone = -1

// CheckTemperature accepts a finite temperature >= 0 (0 is greedy).
func CheckTemperature[F float32 | float64](x F) error {
	return checkFloat("temperature", x, x >= 0, wantTemperature)
}

// CheckTopK accepts 0 <= k <= 2^31-1 (0 disables top-k).
func CheckTopK[I int | int64](k I) error {
	return checkInt("top_k", int64(k), 0, wantTopK)
}

// CheckTopP accepts 0 < p <= 1 (1 disables top-p; 0 would keep nothing).
func CheckTopP[F float32 | float64](p F) error {
	return checkFloat("top_p", p, p > 0 && p <= 1, wantTopP)
}

// CheckMinP accepts 0 <= p <= 1 (0 disables min-p; 1 keeps only the most
// likely ids; above 1 would keep nothing).
func CheckMinP[F float32 | float64](p F) error {
	return checkFloat("min_p", p, p >= 0 && p <= 1, wantMinP)
}

// CheckRepeatPenalty accepts a finite penalty > 0 (1 disables it).
func CheckRepeatPenalty[F float32 | float64](x F) error {
	return checkFloat("repeat_penalty", x, x > 0, wantRepeatPenalty)
}

// CheckPresencePenalty accepts any finite penalty (0 disables it).
func CheckPresencePenalty[F float32 | float64](x F) error {
	return checkFloat("presence_penalty", x, true, "")
}

// CheckFrequencyPenalty accepts any finite penalty (0 disables it).
func CheckFrequencyPenalty[F float32 | float64](x F) error {
	return checkFloat("frequency_penalty", x, true, "")
}

// CheckRepeatLastN accepts -1 <= n <= 2^31-1 (-1: the whole context, 0
// disables the penalties).
func CheckRepeatLastN[I int | int64](n I) error {
	return checkInt("repeat_last_n", int64(n), -1, wantRepeatLastN)
}

// CheckMaxTokens accepts a budget of 1 to 2^31-1 tokens, or
// MaxTokensUntilDone.
func CheckMaxTokens[I int | int64](n I) error {
	if n == MaxTokensUntilDone {
		return nil
	}
	return checkInt("max_tokens", int64(n), 1, wantMaxTokens)
}

// CheckStopString accepts a non-empty stop string (an empty one would stop
// before the first token).
func CheckStopString(s string) error {
	if s == "" {
		return &FieldError{Field: "stop", Value: `""`, reason: "is an empty string; a stop string needs at least one character"}
	}
	return nil
}

// CheckStopID accepts a stop token id in [0, vocab), vocab being the
// target's vocabulary size, or 0 while it is not known (then the bound is
// 2^31-1).
func CheckStopID[I int | int32 | int64](id I, vocab int) error {
	limit, bound := int64(maxCount)+1, "the vocabulary size"
	if vocab > 0 {
		limit, bound = int64(vocab), strconv.Itoa(vocab)+" (the vocabulary size)"
	}
	if id < 0 || int64(id) >= limit {
		return &FieldError{Field: "stop", Value: strconv.FormatInt(int64(id), 10),
			reason: "is not a token id: want 0 <= id < " + bound}
	}
	return nil
}

// checkFloat refuses NaN and infinities, then values for which ok is false.
func checkFloat[F float32 | float64](field string, x F, ok bool, want string) error {
	bits := 64
	if _, single := any(x).(float32); single {
		bits = 32
	}
	value := strconv.FormatFloat(float64(x), 'g', -1, bits)
	switch {
	case math.IsNaN(float64(x)) || math.IsInf(float64(x), 0):
		reason := "is not a finite number"
		if want != "" {
			reason += ": want " + want
		}
		return &FieldError{Field: field, Value: value, reason: reason}
	case !ok:
		return &FieldError{Field: field, Value: value, reason: "is out of range: want " + want}
	}
	return nil
}

// checkInt refuses n outside [lo, maxCount].
func checkInt(field string, n, lo int64, want string) error {
	if n > maxCount {
		// The lower bound's words ("want >= 1") would not say what is
		// wrong with a value that large.
		want = "at most " + strconv.Itoa(maxCount)
	}
	if n < lo || n > maxCount {
		return &FieldError{Field: field, Value: strconv.FormatInt(n, 10), reason: "is out of range: want " + want}
	}
	return nil
}
