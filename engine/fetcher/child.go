package fetcher

import (
	"bufio"
	"errors"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
)

// The environment of a filter process: the marker that makes
// [RunFilterChild] serve, its memory limit in bytes, and its CPU time per
// page in seconds.
const (
	filterChildEnv  = "SIFTBATCH_FILTER_CHILD"
	filterMemoryEnv = "SIFTBATCH_FILTER_MEMORY"
	filterCPUEnv    = "SIFTBATCH_FILTER_CPU"
)

// Exit codes of a filter process, besides 0 (its input closed).
const (
	childExitProtocol = 3 // a request it could not read, or a response it could not write
	childExitCPU      = 4 // its CPU time passed the limit (SIGXCPU)
)

// RunFilterChild serves the fetcher's filters when this process is one of
// its filter processes, and returns at once otherwise. Call it first thing
// in main, before anything else runs (flags, logging, servers), in every
// program that makes a [Fetcher], and in the TestMain of every package
// whose tests do:
//
//	func main() {
//		fetcher.RunFilterChild()
//		…
//	}
//
// A [Fetcher] runs jq and grep in child processes that re-execute the
// program's own binary (/proc/self/exe) with a marker in their
// environment; in such a process RunFilterChild reads pages from standard
// input, filters them, writes the results to standard output, and exits
// when its input closes: it never returns. Whatever main does before it,
// each filter process does too. In a program that has not called it, a
// Fetcher starts no filter process, and a target with jq or grep fails
// "filters unavailable: the program does not call fetcher.RunFilterChild
// at the top of main". A program that
// calls it late, after main has started other work, runs that work again
// in each filter process it starts, until the fetcher kills it: a filter
// process that writes anything else first on its standard output, or
// ends before it said it is ready, is killed, and its target fails
// "filters unavailable: the program does not call fetcher.RunFilterChild
// at the top of main"; one only slow to say it is waited for (a silent one
// for at most 30s, then killed, its target failed 503 as not started in
// time). It is not safe to call concurrently; main calls it once.
func RunFilterChild() {
	if os.Getenv(filterChildEnv) == "" {
		hookCalled.Store(true)
		return
	}
	os.Exit(filterChild(os.Stdin, os.Stdout))
}

// hookCalled records that this process called [RunFilterChild] (and is
// not a filter process): filter processes are started only then.
var hookCalled atomic.Bool

// filterChild is a filter process's life: it says it is ready, then
// answers each request on in with a response on out, until in closes.
// One page at a time, on one thread of Go code (GOMAXPROCS 1); the Go
// memory limit set a little under the hard one makes the collector work
// harder before the hard limit kills the process.
func filterChild(in io.Reader, out io.Writer) int {
	runtime.GOMAXPROCS(1)
	if mem, err := strconv.ParseInt(os.Getenv(filterMemoryEnv), 10, 64); err == nil && mem > 0 {
		debug.SetMemoryLimit(mem - min(mem/4, 32<<20))
	}
	cpu, _ := strconv.Atoi(os.Getenv(filterCPUEnv))
	exitOnCPULimit(childExitCPU)
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	if _, err := w.WriteString(magicReady); err != nil || w.Flush() != nil {
		return childExitProtocol
	}
	var buf []byte
	for {
		req, b, err := readRequest(r, buf)
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil {
			return childExitProtocol
		}
		if cap(b) <= 4<<20 {
			buf = b // a larger page's buffer is not kept
		}
		if w.WriteByte(ackRequest) != nil || w.Flush() != nil {
			return childExitProtocol
		}
		limitCPU(cpu)
		resp := filterPage(req)
		if writeResponse(w, resp) != nil || w.Flush() != nil {
			return childExitProtocol
		}
	}
}
