package engine

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/sample"
)

// agree makes a request run alike on every rank of a sharded target. The
// ranks must build the same forwards in the same order (each forward ends
// in collectives that wait for all of them), so nothing may depend on one
// rank's clock or randomness:
//   - the depth is fixed (seededDepth): the adaptive controller picks depths
//     from wall-clock costs, which differ between ranks; greedy output does
//     not depend on the depth;
//   - a sampled request without a seed takes rank 0's random seed.
//
// It runs on the worker and, for a sampled request, evaluates a collective:
// every rank calls it once per request (their requests are the same).
func (e *Engine) agree(opts *sample.Options, req *Request) error {
	if req.FixedDepth == 0 && req.Drafter == nil && e.HasDraft() {
		req.FixedDepth = e.seededDepth()
	}
	if opts.Temperature <= 0 || opts.UseSeed {
		return nil
	}
	// The other ranks add zeros to rank 0's seed, in two int32 halves.
	var seed [2]int32
	if e.group.Rank() == 0 {
		var b [8]byte
		rand.Read(b[:]) // never fails (crypto/rand aborts the program instead)
		seed[0], seed[1] = int32(binary.LittleEndian.Uint32(b[:4])), int32(binary.LittleEndian.Uint32(b[4:]))
	}
	sum := mlx.AllSum(mlx.FromInt32s(seed[:], 2), e.group)
	if err := mlx.Eval(sum); err != nil {
		return err
	}
	v, err := sum.Int32s()
	if err != nil {
		return err
	}
	opts.Seed, opts.UseSeed = uint64(uint32(v[0]))|uint64(uint32(v[1]))<<32, true
	return nil
}
