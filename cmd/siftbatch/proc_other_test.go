//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: only Linux kills a child with its
// parent. The tests' cleanups stop their processes.
func dieWithParent(*exec.Cmd) {}

// setFileLimit does nothing here: the test that needs it runs on Linux.
func setFileLimit(string) {}
