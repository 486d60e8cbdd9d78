package sample_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/specula-dev/specula/sample"
)

// FuzzChecks holds the Check functions to their documented ranges, written
// here independently, for float32 and float64 values and any integers; every
// refusal is a *FieldError whose message names the setting and the value.
func FuzzChecks(f *testing.F) {
	f.Add(0.0, 1.0, 0.0, int64(0), int64(256), "x")
	f.Add(math.NaN(), 2.0, 1.5, int64(-1), int64(-1), "")
	f.Add(1e-45, 1e-9, 1.0, int64(1), int64(0), "\x00")
	f.Add(math.Inf(-1), -0.5, -0.0, int64(math.MaxInt32)+1, int64(-2), "stop")
	f.Fuzz(func(t *testing.T, temp, topP, minP float64, k, maxTokens int64, stop string) {
		finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
		check := func(field string, err error, ok bool) {
			t.Helper()
			if ok != (err == nil) {
				t.Fatalf("%s: accepted %v, want %v (%v)", field, err == nil, ok, err)
			}
			if err == nil {
				return
			}
			var fe *sample.FieldError
			if !errors.As(err, &fe) || fe.Field != field || !strings.HasPrefix(err.Error(), field+" = "+fe.Value+" ") || fe.Reason("x") == "" {
				t.Fatalf("%s: error %v (%T)", field, err, err)
			}
		}
		for _, bits := range []int{64, 32} {
			tt, pp, mp := temp, topP, minP
			if bits == 32 {
				tt, pp, mp = float64(float32(temp)), float64(float32(topP)), float64(float32(minP))
				check("temperature", sample.CheckTemperature(float32(temp)), finite(tt) && tt >= 0)
				check("top_p", sample.CheckTopP(float32(topP)), finite(pp) && pp > 0 && pp <= 1)
				check("min_p", sample.CheckMinP(float32(minP)), finite(mp) && mp >= 0 && mp <= 1)
				check("repeat_penalty", sample.CheckRepeatPenalty(float32(temp)), finite(tt) && tt > 0)
				check("presence_penalty", sample.CheckPresencePenalty(float32(topP)), finite(pp))
				continue
			}
			check("temperature", sample.CheckTemperature(temp), finite(tt) && tt >= 0)
			check("top_p", sample.CheckTopP(topP), finite(pp) && pp > 0 && pp <= 1)
			check("min_p", sample.CheckMinP(minP), finite(mp) && mp >= 0 && mp <= 1)
			check("frequency_penalty", sample.CheckFrequencyPenalty(minP), finite(mp))
		}
		check("top_k", sample.CheckTopK(k), k >= 0 && k <= math.MaxInt32)
		check("repeat_last_n", sample.CheckRepeatLastN(k), k >= -1 && k <= math.MaxInt32)
		check("max_tokens", sample.CheckMaxTokens(maxTokens), maxTokens == -1 || (maxTokens >= 1 && maxTokens <= math.MaxInt32))
		check("stop", sample.CheckStopID(k, 0), k >= 0 && k <= math.MaxInt32)
		check("stop", sample.CheckStopID(k, 1000), k >= 0 && k < 1000)
		check("stop", sample.CheckStopString(stop), stop != "")
	})
}
