package fetcher

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// selfExecutable returns the path that re-executes this process's own
// binary, even one replaced or deleted on disk since it started.
func selfExecutable() (string, error) { return "/proc/self/exe", nil }

// childProcAttr puts a filter process in a process group of its own (a
// terminal's Ctrl-C is the parent's to handle) and has the kernel kill it
// if the thread that started it ends (Go ends a thread only when a
// goroutine locked to it returns still locked, which the fetcher never
// does); its standard input closing when the parent dies ends it too.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// exitOnCPULimit makes the process exit with code when its CPU time
// passes its soft RLIMIT_CPU (SIGXCPU, which Go ignores by default).
func exitOnCPULimit(code int) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGXCPU)
	go func() {
		<-c
		os.Exit(code)
	}()
}

// limitCPU sets the process's soft RLIMIT_CPU to its CPU time so far
// (rounded up to the second) plus budget seconds: a page gets between
// budget and budget+1 seconds, however many pages the process did before.
// The hard limit is left as it is, so that the soft one can rise again
// without privileges. budget 0 sets nothing.
func limitCPU(budget int) {
	if budget <= 0 {
		return
	}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return
	}
	usec := (ru.Utime.Sec+ru.Stime.Sec)*1e6 + ru.Utime.Usec + ru.Stime.Usec
	used := uint64((usec + 999999) / 1e6)
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_CPU, &lim) != nil {
		return
	}
	lim.Cur = min(used+uint64(budget), lim.Max)
	_ = unix.Setrlimit(unix.RLIMIT_CPU, &lim)
}

// limitAddressSpace sets pid's RLIMIT_AS (soft and hard) to its address
// space now, read from /proc (a Go process reserves about 1.2 GB at
// start, more under the race detector), plus limit bytes, unless its
// limit is lower already.
func limitAddressSpace(pid int, limit int64) error {
	vm, err := vmSize(pid)
	if err != nil {
		return err
	}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_AS, nil, &old); err != nil {
		return fmt.Errorf("read RLIMIT_AS: %w", err)
	}
	want := min(uint64(vm)+uint64(limit), old.Max)
	if err := unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: want, Max: want}, nil); err != nil {
		return fmt.Errorf("set RLIMIT_AS: %w", err)
	}
	return nil
}

// vmSize returns pid's address space in bytes (VmSize in
// /proc/PID/status).
func vmSize(pid int) (int64, error) {
	return procStatus(pid, "VmSize:")
}

// procStatus returns the value of a kB line of /proc/PID/status, in bytes.
func procStatus(pid int, key string) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s %w", key, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

// memCgroup is the memory cgroup under which filter processes get their
// own cgroups: the process's own, where it may create children that have
// a memory limit.
type memCgroup struct {
	dir string // its directory in the cgroup file system
	v2  bool   // cgroup v2 (memory.max), else v1 (memory.limit_in_bytes)
}

// cgroupPrefix begins the name of each filter process's cgroup, followed
// by the fetcher's pid and a number.
const cgroupPrefix = "siftbatch-filter-"

var (
	cgroupOnce  sync.Once
	cgroupFound *memCgroup // nil: none usable
	cgroupSeq   atomic.Int64
)

// findCgroup returns the memory cgroup filter processes go under, found
// once per process, or nil where none is usable: not mounted, not
// writable, or (cgroup v2) the memory controller cannot be enabled for
// the process's cgroup's children, as when that cgroup has processes of
// its own and is not the root (the "no internal processes" rule).
func findCgroup() *memCgroup {
	cgroupOnce.Do(func() {
		self, err1 := os.ReadFile("/proc/self/cgroup")
		mounts, err2 := os.ReadFile("/proc/self/mountinfo")
		if err1 != nil || err2 != nil {
			return
		}
		for _, v2 := range []bool{true, false} {
			dir := cgroupDir(string(self), string(mounts), v2)
			if dir != "" && probeCgroup(dir, v2) {
				cgroupFound = &memCgroup{dir: dir, v2: v2}
				cgroupFound.removeStale()
				return
			}
		}
	})
	return cgroupFound
}

// cgroupDir returns the directory of the process's memory cgroup of the
// given version, from /proc/self/cgroup and /proc/self/mountinfo, or "".
func cgroupDir(self, mounts string, v2 bool) string {
	var path string
	for line := range strings.Lines(self) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 && parts[0] == "0" && parts[1] == "" || !v2 && parts[0] != "0" && hasWord(parts[1], "memory", ",") {
			path = parts[2]
			break
		}
	}
	if path == "" {
		return ""
	}
	for line := range strings.Lines(mounts) {
		pre, post, ok := strings.Cut(strings.TrimSpace(line), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		root, point, fstype, opts := f[3], f[4], g[0], g[2]
		if v2 && fstype != "cgroup2" || !v2 && (fstype != "cgroup" || !hasWord(opts, "memory", ",")) {
			continue
		}
		rel, ok := strings.CutPrefix(path, root)
		if root == "/" {
			rel, ok = path, true
		}
		if !ok || strings.Contains(rel, "..") {
			continue
		}
		return filepath.Join(point, rel)
	}
	return ""
}

// hasWord reports whether list, split by sep, holds w.
func hasWord(list, w, sep string) bool {
	for x := range strings.SplitSeq(strings.TrimSpace(list), sep) {
		if x == w {
			return true
		}
	}
	return false
}

// probeCgroup reports whether a child cgroup of dir with a memory limit
// can be made: for v2, the memory controller enabled for dir's children
// (enabling it if need be).
func probeCgroup(dir string, v2 bool) bool {
	limitFile := "memory.limit_in_bytes"
	if v2 {
		limitFile = "memory.max"
		ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil || !hasWord(string(ctl), "memory", " ") {
			return false
		}
		sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return false
		}
		if !hasWord(string(sub), "memory", " ") {
			if os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0) != nil {
				return false // EBUSY: dir has processes of its own
			}
		}
	}
	probe := filepath.Join(dir, fmt.Sprintf("%s%d-probe", cgroupPrefix, os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return false
	}
	_, err := os.Stat(filepath.Join(probe, limitFile))
	_ = os.Remove(probe)
	return err == nil
}

// removeStale removes the filter cgroups left by fetcher processes that
// have ended (killed before they could remove them).
func (m *memCgroup) removeStale() {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err != nil || n == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(filepath.Join(m.dir, e.Name()))
		}
	}
}

// place makes a cgroup limited to limit bytes of memory (and no swap)
// and moves pid into it; it returns the cgroup's directory.
func (m *memCgroup) place(pid int, limit int64) (string, error) {
	dir := filepath.Join(m.dir, fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	limitFile, swapFile, swap := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10)
	if m.v2 {
		limitFile, swapFile, swap = "memory.max", "memory.swap.max", "0"
	}
	err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0)
	if err == nil {
		_ = os.WriteFile(filepath.Join(dir, swapFile), []byte(swap), 0) // no swap accounting: fine
		err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	}
	if err != nil {
		_ = os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// ooms returns how many processes the kernel killed in the cgroup dir for
// passing its memory limit.
func (m *memCgroup) ooms(dir string) int64 {
	file := "memory.oom_control"
	if m.v2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// remove removes the cgroup dir, whose process has been reaped.
func (m *memCgroup) remove(dir string) { _ = os.Remove(dir) }

// sandboxName names m's kind of limit, for tests and figures.
func (m *memCgroup) sandboxName() string {
	if m.v2 {
		return "cgroup v2"
	}
	return "cgroup v1"
}

// cpuSignal reports whether s is the signal of a passed RLIMIT_CPU.
func cpuSignal(s syscall.Signal) bool { return s == syscall.SIGXCPU }

// pipeHungUp reports whether every writer of the pipe whose read end is
// r has closed it: for a filter process's standard output, that the
// process has ended. It does not read and does not wait.
func pipeHungUp(r *os.File) bool {
	rc, err := r.SyscallConn()
	if err != nil {
		return false
	}
	hup := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		hup = err == nil && n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
	})
	return hup
}
