package mlx

/*
#include "shim/shim.h"
*/
import "C"

// Random numbers use explicit keys (a uint32 array of shape [2]) so that a
// seeded request is reproducible: derive one key per draw and never reuse it.

// RandomKey returns the key for a seed.
func RandomKey(seed uint64) *Array {
	mustWorker()
	return build(func(out *C.spx_array) C.int { return C.spx_random_key(out, C.uint64_t(seed)) })
}

// RandomSplit splits key into num new keys, shape [num, 2].
func RandomSplit(key *Array, num int) *Array {
	must(key)
	return build(func(out *C.spx_array) C.int { return C.spx_random_split(out, key.c, C.int(num), defaultStream) }, key)
}

// RandomUniform draws from [0, 1). key may be nil (MLX's global generator).
func RandomUniform(key *Array, dtype DType, shape ...int) *Array {
	mustWorker()
	s, n := cInts(shape)
	return build(func(out *C.spx_array) C.int {
		return C.spx_random_uniform(out, s, n, C.int(dtype), h(key), defaultStream)
	}, key)
}

// RandomNormal draws from N(loc, scale²). key may be nil.
func RandomNormal(key *Array, dtype DType, loc, scale float32, shape ...int) *Array {
	mustWorker()
	s, n := cInts(shape)
	return build(func(out *C.spx_array) C.int {
		return C.spx_random_normal(out, s, n, C.int(dtype), C.float(loc), C.float(scale), h(key), defaultStream)
	}, key)
}

// RandomCategorical draws one index per row from unnormalised log-probabilities
// along axis. key may be nil.
func RandomCategorical(key, logits *Array, axis int) *Array {
	must(logits)
	return build(func(out *C.spx_array) C.int {
		return C.spx_random_categorical(out, logits.c, C.int(axis), h(key), defaultStream)
	}, logits, key)
}
