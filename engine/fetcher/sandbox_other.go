//go:build !linux

package fetcher

import (
	"errors"
	"os"
	"syscall"
)

// selfExecutable returns the path of this process's own binary.
func selfExecutable() (string, error) { return os.Executable() }

// childProcAttr: nothing to add outside Linux.
func childProcAttr() *syscall.SysProcAttr { return nil }

// exitOnCPULimit: no CPU limit outside Linux; the deadline kills.
func exitOnCPULimit(int) {}

// limitCPU: no CPU limit outside Linux; the deadline kills.
func limitCPU(int) {}

// limitAddressSpace: no hard memory limit outside Linux (the Go memory
// limit the process sets is its only bound).
func limitAddressSpace(int, int64) error { return nil }

// procStatus: no /proc outside Linux.
func procStatus(int, string) (int64, error) { return 0, errors.ErrUnsupported }

// memCgroup: no cgroups outside Linux.
type memCgroup struct{}

func findCgroup() *memCgroup                        { return nil }
func (*memCgroup) place(int, int64) (string, error) { return "", errors.ErrUnsupported }
func (*memCgroup) ooms(string) int64                { return 0 }
func (*memCgroup) remove(string)                    {}
func (*memCgroup) sandboxName() string              { return "none" }

// cpuSignal: no CPU limit outside Linux.
func cpuSignal(syscall.Signal) bool { return false }

// pipeHungUp: not told outside Linux; a dead idle process is found when
// it does not acknowledge its request.
func pipeHungUp(*os.File) bool { return false }
