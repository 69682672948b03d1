package main

import (
	"os/exec"
	"strconv"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when the test binary
// dies, even killed at its -timeout, when no cleanup runs.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// setFileLimit sets this process's RLIMIT_NOFILE, soft and hard, to the
// number s names, if any: a serve started by the tests with fileLimitEnv
// (TestServe_IdleConnectionsCannotStarve), before main.
func setFileLimit(s string) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
}
