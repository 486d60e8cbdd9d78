//go:build linux

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal. Being a character device is
// not enough: /dev/null is one too, and a command run from cron, CI or
// nohup reads it as standard input; only a terminal answers the termios
// request.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
