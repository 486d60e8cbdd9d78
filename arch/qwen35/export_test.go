package qwen35

// Test hooks for the external tests of this package.

// SetSegmentsOff turns the compiled segments off (true) or on and returns
// the previous setting (SPECULA_SEGMENTS=0 at start-up turns them off).
func SetSegmentsOff(off bool) bool {
	was := segmentsOff
	segmentsOff = off
	return was
}

// CompiledSegments is the number of compiled segment functions m holds.
func CompiledSegments(m *Model) int {
	if m.segs == nil {
		return 0
	}
	return len(m.segs.funcs)
}
