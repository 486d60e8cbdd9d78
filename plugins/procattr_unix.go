//go:build unix

package plugins

import (
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the plugin in a process group of its own, so that a
// Ctrl-C in the terminal reaches only the host: the host then ends the
// request and shuts its plugins down in order (a plugin killed by the same
// SIGINT would look like a crash mid-request). A host that dies without
// shutting them down is noticed by the SDK's parent watch.
func ownProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// killProcess ends p and every process in its group (the plugin's helpers
// too) with SIGKILL, which also ends a stopped process.
func killProcess(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err == nil {
		return nil
	}
	return p.Kill()
}
