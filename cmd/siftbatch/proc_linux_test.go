package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when the test binary
// dies, even killed at its -timeout, when no cleanup runs.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
