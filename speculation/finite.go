package speculation

import (
	"errors"
	"fmt"
	"math"

	"github.com/specula-dev/specula/mlx"
)

// ErrNonFiniteLogits is returned (wrapped) when the target's logits at a
// request's first step hold NaN or +Inf, or are all −Inf: broken weights
// (a NaN anywhere in a checkpoint spreads to every logit) or a compute
// dtype that overflows. Sampling from them would emit an arbitrary token
// (the argmax of NaNs) forever, and every draft would look accepted.
var ErrNonFiniteLogits = errors.New("the target's logits are not finite (NaN or infinite)")

// logitsProbe returns, for the session's first target logits only, a lazy
// float32 scalar that is finite iff the logits are usable: the largest
// logit with NaN counted as +Inf. Later calls return nil. Reading it costs
// one reduction and one host read per request.
func (s *Session) logitsProbe(logits *mlx.Array) *mlx.Array {
	if s.logitsChecked {
		return nil
	}
	s.logitsChecked = true
	x := mlx.AsType(logits, mlx.Float32)
	inf := mlx.Scalar(math.Inf(1), mlx.Float32)
	return mlx.Max(mlx.Where(mlx.IsNaN(x), inf, x), false)
}

// checkProbe evaluates a probe from logitsProbe (nil: nothing to check).
func checkProbe(probe *mlx.Array) error {
	if probe == nil {
		return nil
	}
	v, err := probe.Item()
	if err != nil {
		return err
	}
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return fmt.Errorf("%w at the first step: its weights hold NaN or infinite values, or its compute dtype overflows; check the checkpoint (specula forward, then compare with a reference) or try dtype = \"float32\"", ErrNonFiniteLogits)
	}
	return nil
}
