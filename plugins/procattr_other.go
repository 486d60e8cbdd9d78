//go:build !unix

package plugins

import (
	"os"
	"os/exec"
)

// ownProcessGroup does nothing where process groups do not exist.
func ownProcessGroup(*exec.Cmd) {}

// killProcess ends p at once.
func killProcess(p *os.Process) error { return p.Kill() }
