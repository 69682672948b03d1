package fetcher

import "time"

// Test hooks into a fetcher's filter processes.

// FilterPIDs returns the process ids of f's live filter processes.
func FilterPIDs(f *Fetcher) []int { return f.filters.pids() }

// FilterSandbox names the memory limit f's next filter process gets:
// "cgroup v2", "cgroup v1" or "rlimit".
func FilterSandbox(f *Fetcher) string { return f.filters.sandbox() }

// ForceRlimit makes f's filter processes use RLIMIT_AS, never a cgroup.
// Call it before the first filtered fetch.
func ForceRlimit(f *Fetcher) { f.filters.rlimitOnly = true }

// SetFilterBounds sets f's filter deadline and CPU time per page (whole
// seconds; 0 for none). Call it before the first filtered fetch.
func SetFilterBounds(f *Fetcher, timeout time.Duration, cpuSeconds int) {
	f.filters.timeout, f.filters.cpu = timeout, cpuSeconds
}

// SetFilterEnv adds env to the environment of f's new filter processes
// (nil: none).
func SetFilterEnv(f *Fetcher, env []string) { f.filters.env = env }
