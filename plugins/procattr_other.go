//go:build !unix

package plugins

import "os/exec"

// ownProcessGroup does nothing where process groups do not exist.
func ownProcessGroup(*exec.Cmd) {}
