package sample_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// The ranges accept the edge values that keep a meaning and refuse the
// rest, with messages that name the setting and its valid range.
func TestChecks(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name string
		err  error
		want string // "" accepted
	}{
		{"temperature 0 is greedy", sample.CheckTemperature(0.0), ""},
		{"tiny temperature", sample.CheckTemperature(float32(1e-45)), ""},
		{"negative temperature", sample.CheckTemperature(-1.0), "temperature = -1 is out of range: want >= 0 (0 is greedy)"},
		{"NaN temperature", sample.CheckTemperature(nan), "temperature = NaN is not a finite number: want >= 0 (0 is greedy)"},
		{"infinite temperature", sample.CheckTemperature(float32(inf)), "temperature = +Inf is not a finite number"},
		{"float32 value as written", sample.CheckTemperature(float32(-0.1)), "temperature = -0.1 is out"},
		{"top-k 0 is off", sample.CheckTopK(0), ""},
		{"top-k 1", sample.CheckTopK(1), ""},
		{"negative top-k", sample.CheckTopK(-1), "top_k = -1 is out of range: want >= 0 (0 disables top-k)"},
		// Past the int32 bound the message names that bound: "want >= 0"
		// alone contradicted the value.
		{"huge top-k", sample.CheckTopK(int64(1) << 40), "top_k = 1099511627776 is out of range: want at most 2147483647"},
		{"max_tokens past int32", sample.CheckMaxTokens(int64(1) << 31), "max_tokens = 2147483648 is out of range: want at most 2147483647"},
		{"repeat_last_n past int32", sample.CheckRepeatLastN(int64(1) << 31), "repeat_last_n = 2147483648 is out of range: want at most 2147483647"},
		{"top-p 1 is off", sample.CheckTopP(1.0), ""},
		{"tiny top-p", sample.CheckTopP(1e-9), ""},
		{"top-p 0 keeps nothing", sample.CheckTopP(0.0), "top_p = 0 is out of range: want 0 < top_p <= 1 (1 disables top-p)"},
		{"top-p 2", sample.CheckTopP(2.0), "top_p = 2 is out of range"},
		{"negative top-p", sample.CheckTopP(-0.5), "top_p = -0.5 is out of range"},
		{"min-p 0 is off", sample.CheckMinP(0.0), ""},
		{"min-p 1 keeps the best", sample.CheckMinP(1.0), ""},
		{"min-p 1.5 keeps nothing", sample.CheckMinP(1.5), "min_p = 1.5 is out of range: want 0 <= min_p <= 1 (0 disables min-p)"},
		{"negative min-p", sample.CheckMinP(-1.0), "min_p = -1 is out of range"},
		{"repeat penalty 1 is off", sample.CheckRepeatPenalty(1.0), ""},
		{"repeat penalty 0", sample.CheckRepeatPenalty(0.0), "repeat_penalty = 0 is out of range: want > 0 (1 disables it)"},
		{"negative presence penalty", sample.CheckPresencePenalty(-2.0), ""},
		{"infinite frequency penalty", sample.CheckFrequencyPenalty(-inf), "frequency_penalty = -Inf is not a finite number"},
		{"repeat_last_n -1 is the whole context", sample.CheckRepeatLastN(-1), ""},
		{"repeat_last_n -2", sample.CheckRepeatLastN(-2), "repeat_last_n = -2 is out of range: want >= -1"},
		{"max_tokens 1", sample.CheckMaxTokens(1), ""},
		{"max_tokens -1 runs until done", sample.CheckMaxTokens(-1), ""},
		{"max_tokens 0", sample.CheckMaxTokens(0), "max_tokens = 0 is out of range: want >= 1, or -1 to generate until a stop or the end of the context"},
		{"max_tokens -2", sample.CheckMaxTokens(-2), "max_tokens = -2 is out of range"},
		{"stop string", sample.CheckStopString("\n"), ""},
		{"empty stop string", sample.CheckStopString(""), `stop = "" is an empty string; a stop string needs at least one character`},
		{"stop id", sample.CheckStopID(0, 0), ""},
		{"negative stop id", sample.CheckStopID(-1, 0), "stop = -1 is not a token id: want 0 <= id < the vocabulary size"},
		{"stop id past the vocabulary", sample.CheckStopID(int32(512), 512), "stop = 512 is not a token id: want 0 <= id < 512 (the vocabulary size)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == "" {
				if c.err != nil {
					t.Fatalf("refused: %v", c.err)
				}
				return
			}
			var fe *sample.FieldError
			if !errors.As(c.err, &fe) {
				t.Fatalf("error %v (%T), want a *FieldError", c.err, c.err)
			}
			if got := fe.Error(); len(got) < len(c.want) || got[:len(c.want)] != c.want {
				t.Fatalf("error %q, want it to start with %q", got, c.want)
			}
		})
	}
}

// Reason words the range with the caller's name for the setting.
func TestFieldErrorReasonUsesTheCallersName(t *testing.T) {
	var fe *sample.FieldError
	if !errors.As(sample.CheckTopP(2.0), &fe) {
		t.Fatal("top-p 2 accepted")
	}
	if fe.Field != "top_p" || fe.Value != "2" {
		t.Fatalf("field %q value %q", fe.Field, fe.Value)
	}
	if got, want := fe.Reason("top-p"), "is out of range: want 0 < top-p <= 1 (1 disables top-p)"; got != want {
		t.Fatalf("Reason(top-p) = %q, want %q", got, want)
	}
}

// A temperature so small that x/T overflows float32 (or, subnormal, is
// flushed to zero) still gives the one-hot distribution on the argmax, in
// Distribution and in the selector's Choose, instead of NaN.
func TestTinyTemperatureIsOneHot(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		logits := mlx.FromFloat32s([]float32{
			0.5, 3, -2, 1,
			-4, -3, 7, 6.9,
		}, 2, 4)
		for _, temp := range []float32{1e-30, 1e-38, 1e-45} {
			s := seeded(sample.Options{Temperature: temp}, 1)
			d := s.Distribution(logits, nil)
			want := []float32{0, 1, 0, 0, 0, 0, 1, 0}
			if got := t.Float32s(d.Probs); !slices.Equal(got, want) {
				t.Fatalf("T=%g: probs %v, want %v", temp, got, want)
			}
			if got := t.Int32s(s.Sample(logits, nil)); !slices.Equal(got, []int32{1, 2}) {
				t.Fatalf("T=%g: sampled %v, want [1 2]", temp, got)
			}
			ids := mlx.FromInt32s([]int32{10, 11, 12, 13, 20, 21, 22, 23}, 2, 4)
			tokens, probs := s.Choose(ids, logits)
			if got := t.Int32s(tokens); !slices.Equal(got, []int32{11, 22}) {
				t.Fatalf("T=%g: chose %v, want [11 22]", temp, got)
			}
			if got := t.Float32s(probs); !slices.Equal(got, want) {
				t.Fatalf("T=%g: choice probs %v, want %v", temp, got, want)
			}
		}
	})
}

// min-p 1 keeps only the most likely id (a one-hot row, exactly 1).
func TestMinPOneKeepsTheBest(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		logits := mlx.FromFloat32s([]float32{0.5, 3, -2, 2.99}, 1, 4)
		d := seeded(sample.Options{Temperature: 2, MinP: 1}, 1).Distribution(logits, nil)
		if got := t.Float32s(d.Probs); !slices.Equal(got, []float32{0, 1, 0, 0}) {
			t.Fatalf("probs %v, want one-hot on id 1", got)
		}
	})
}
