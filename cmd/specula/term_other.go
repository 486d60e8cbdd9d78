//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device, the closest this
// platform's standard library comes to asking whether it is a terminal.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
