//go:build unix

package connlimit

import "syscall"

// fileLimit is the process's RLIMIT_NOFILE (its soft limit), 0 if unknown.
func fileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
