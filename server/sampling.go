package server

import (
	"encoding/json"
	"errors"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/sample"
)

// sampling holds the generation settings a request sets, as decoded from
// JSON (nil: not set, the manifest's default applies).
type sampling struct {
	temperature, topP, minP                          *float64
	repeatPenalty, presencePenalty, frequencyPenalty *float64
	topK, repeatLastN                                *int
	seed                                             *int64
	stops                                            []string
}

// fieldNames maps a setting's name as manifests spell it (engine.FieldError's
// Field) to the API's own spelling, for error messages.
type fieldNames map[string]string

func f32(x *float64) *float32 {
	if x == nil {
		return nil
	}
	v := float32(*x)
	return &v
}

// setSampling copies s into r and validates the result with the engine's
// rules (engine.Request.Validate: one set of rules for manifests, the
// command line and both APIs), naming the field in the API's spelling.
func setSampling(r *engine.Request, s sampling, names fieldNames) error {
	r.Temperature = f32(s.temperature)
	r.TopP = f32(s.topP)
	r.MinP = f32(s.minP)
	r.RepeatPenalty = f32(s.repeatPenalty)
	r.PresencePenalty = f32(s.presencePenalty)
	r.FrequencyPenalty = f32(s.frequencyPenalty)
	r.TopK = s.topK
	r.RepeatLastN = s.repeatLastN
	if s.seed != nil {
		// Any integer is a seed; negative ones keep their bits.
		v := uint64(*s.seed)
		r.Seed = &v
	}
	r.StopStrings = append(r.StopStrings, s.stops...)
	return fieldError(r.Validate(), names)
}

// setMaxTokens sets the token budget from the API's field (param names it):
// n >= 1, or -1 for "until a stop or the end of the context"; with
// fillContext, ollama's -2 ("fill the context") means the same.
func setMaxTokens(r *engine.Request, n int, param string, fillContext bool) error {
	if n == -2 && fillContext {
		n = engine.MaxTokensUntilDone
	}
	if err := sample.CheckMaxTokens(n); err != nil {
		return fieldError(err, fieldNames{"max_tokens": param})
	}
	r.MaxTokens = n
	return nil
}

// fieldError words a settings error in the API's names: "options.top_p = 2
// is out of range: want 0 < options.top_p <= 1 (1 disables top-p)".
func fieldError(err error, names fieldNames) error {
	if err == nil {
		return nil
	}
	var fe *engine.FieldError
	if !errors.As(err, &fe) {
		return badRequest("", "%v", err)
	}
	name := names[fe.Field]
	if name == "" {
		name = fe.Field
	}
	return badRequest(name, "%s = %s %s", name, fe.Value, fe.Reason(name))
}

// decodeStops reads a stop field: one string or an array of strings.
func decodeStops(raw json.RawMessage, param string) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest(param, "%s must be a string or an array of strings", param)
	}
	return many, nil
}
