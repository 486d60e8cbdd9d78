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

// SetEarlySubmit makes every forward of 2 to 32 rows hand its segments over
// one by one on any device (true) or never (false), and returns a function
// that restores the setting SPECULA_EARLY_SUBMIT gave.
func SetEarlySubmit(on bool) (restore func()) {
	was := earlySubmit
	earlySubmit = earlySubmitOff
	if on {
		earlySubmit = earlySubmitAll
	}
	return func() { earlySubmit = was }
}

// EarlySubmits is how many segments forwards have handed over early.
func EarlySubmits() int { return earlySubmits }

// SetForceDeltaRows makes the delta-net layers hand their interior states
// over as rows (the scan kernel's form) on any device, and returns a
// function that restores the setting.
func SetForceDeltaRows(on bool) (restore func()) {
	was := forceDeltaRows
	forceDeltaRows = on
	return func() { forceDeltaRows = was }
}
