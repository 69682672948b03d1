//go:build !unix

package connlimit

// fileLimit is 0, unknown, where there is no RLIMIT_NOFILE.
func fileLimit() uint64 { return 0 }
