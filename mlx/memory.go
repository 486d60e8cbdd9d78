package mlx

/*
#include "shim/shim.h"
*/
import "C"

// Memory figures are MLX's allocator counters, in bytes.

// ActiveMemory is the memory held by live arrays.
func ActiveMemory() int64 {
	var v C.size_t
	mustStatus(C.spx_memory_active(&v))
	return int64(v)
}

// PeakMemory is the highest ActiveMemory since start or ResetPeakMemory.
func PeakMemory() int64 {
	var v C.size_t
	mustStatus(C.spx_memory_peak(&v))
	return int64(v)
}

// ResetPeakMemory restarts the peak counter.
func ResetPeakMemory() { mustStatus(C.spx_memory_reset_peak()) }

// CacheMemory is the memory kept in MLX's buffer cache for reuse.
func CacheMemory() int64 {
	var v C.size_t
	mustStatus(C.spx_memory_cache(&v))
	return int64(v)
}

// ClearCache returns the buffer cache to the system (after a request).
func ClearCache() { mustStatus(C.spx_memory_clear_cache()) }

// SetMemoryLimit sets the allocator's limit and returns the previous one.
func SetMemoryLimit(bytes int64) int64 {
	var prev C.size_t
	mustStatus(C.spx_memory_set_limit(&prev, C.size_t(bytes)))
	return int64(prev)
}

// SetCacheLimit bounds the buffer cache and returns the previous bound.
func SetCacheLimit(bytes int64) int64 {
	var prev C.size_t
	mustStatus(C.spx_memory_set_cache_limit(&prev, C.size_t(bytes)))
	return int64(prev)
}

// mustStatus panics on failure of a call that cannot fail for valid input.
func mustStatus(rc C.int) {
	if err := status(rc); err != nil {
		panic(err)
	}
}
