package democluster

import (
	"os/exec"
	"syscall"
)

// ownChild makes cmd's process the command's own: in a process group of
// its own, so that a terminal's Ctrl-C reaches the command alone, which
// then stops it; and killed (SIGKILL) by the kernel when the command dies,
// even killed itself, when no cleanup of its runs. Linux sends that signal
// when the thread that started cmd ends: Go ends a thread only when a
// goroutine locked to it (runtime.LockOSThread) returns still locked, which
// the command never does.
func ownChild(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
