//go:build !linux

package democluster

import "os/exec"

// ownChild does nothing here: only Linux kills a child with its parent.
// demo-cluster stops its processes itself, on Ctrl-C too; a demo killed
// with SIGKILL leaves them running.
func ownChild(*exec.Cmd) {}
