package fetcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The bounds of one page's filters, besides the memory limit
// ([Options.FilterMemory]).
const (
	// FilterTimeout is how long jq and grep together may run on one page;
	// past it their process is killed.
	FilterTimeout = time.Second
	// FilterCPU is the CPU time one page's filters may take, a backstop
	// to FilterTimeout (RLIMIT_CPU, set before each page): their process
	// runs Go code on one thread, so the deadline comes first.
	FilterCPU = 2 * time.Second
	// startTimeout bounds how long a new filter process may take to say
	// it is ready. One starts in about 5 ms (23 ms under the race
	// detector, BenchmarkFilterStart), far longer on a loaded machine: a
	// process that is only slow is waited for. Whether the program calls
	// RunFilterChild first is never decided by this bound, but by what
	// the process says (anything but the ready word on its output: the
	// program's main runs) or by its end before it said it. Past it, the
	// process is killed and the page answered "did not start in time",
	// a busy server's 503: it guards against a process that hangs silent.
	startTimeout = 30 * time.Second
	// maxStderr caps the bytes of a dead filter process's standard error
	// read to tell why it died.
	maxStderr = 4 << 10
)

// killReason is why the fetcher killed a filter process; the first reason
// given is kept.
type killReason int32

const (
	killNone     killReason = iota
	killDeadline            // past FilterTimeout
	killCancel              // the fetch's context was done
	killClosed              // the fetcher closed
	killBroken              // garbage, or it did not start
)

var (
	// errPoolClosed is a filter asked for after [Fetcher.Close].
	errPoolClosed = errors.New("fetcher closed")
	// errNotReady is a new filter process that ended before it said it
	// was ready, or said something else first: the program's main ran in
	// it (the program does not call RunFilterChild at the top of main).
	errNotReady = errors.New("filter process not ready")
	// errSlowStart is a new filter process that said nothing, and did not
	// end, within startTimeout.
	errSlowStart = errors.New("filter process did not start in time")
	// errStartKilled is a new filter process killed by a signal the
	// fetcher did not send before it said it was ready (out of memory).
	errStartKilled = errors.New("filter process killed while it started")
	// errStartEnded is readReady's error for a new filter process whose
	// output ended before it said it was ready; start tells how it ended.
	errStartEnded = errors.New("filter process ended before it was ready")
	// errNoHook is a filter asked for in a program that has not called
	// [RunFilterChild]: no filter process is started, since it would run
	// the program's main.
	errNoHook = errors.New("the program does not call fetcher.RunFilterChild at the top of main")
)

// filterPool keeps warm filter processes: at most size of them run pages
// at once; one that ran a page well waits, idle, for the next; one that
// broke a limit (or anything else) is killed, reaped and, when a page
// needs it, replaced by a new one. Safe for concurrent use.
type filterPool struct {
	memory     int64         // each process's memory limit, bytes
	timeout    time.Duration // FilterTimeout; tests shorten or lengthen it
	cpu        int           // FilterCPU in seconds; 0: no CPU limit
	rlimitOnly bool          // never a cgroup (tests of the fallback)
	env        []string      // tests: more environment for new processes
	slots      chan struct{} // one held per process running a page

	// deaths counts the processes that died or were killed while they
	// ran a page, or died idle, by FilterDeath reason (not those killed
	// for a cancelled fetch or a close).
	deaths [len(FilterDeathReasons)]atomic.Uint64

	mu     sync.Mutex
	idle   []*filterProc
	live   map[*filterProc]struct{}
	closed bool
	reaped sync.WaitGroup // one per process started and not yet reaped
}

// filterProc is one filter process and our ends of its pipes.
type filterProc struct {
	cmd    *exec.Cmd
	in     *os.File   // its standard input
	out    *os.File   // its standard output
	errs   *os.File   // its standard error
	cgroup *memCgroup // nil under RLIMIT_AS
	cgdir  string
	why    atomic.Int32 // killReason
}

// kill kills p (SIGKILL), giving why as the reason unless one was given.
func (p *filterProc) kill(why killReason) {
	p.why.CompareAndSwap(int32(killNone), int32(why))
	_ = p.cmd.Process.Kill() // a process that ended already is not hurt
}

// filterEnd is how a filter process ended.
type filterEnd struct {
	why    killReason
	code   int            // exit code; -1 when a signal ended it
	signal syscall.Signal // the signal that ended it, if one did
	oom    bool           // its cgroup counted a kill for memory
	stderr []byte         // the start of its standard error
}

// newFilterPool returns a pool of at most size processes, each limited to
// memory bytes; none is started before a page needs one.
func newFilterPool(size int, memory int64) *filterPool {
	return &filterPool{
		memory:  memory,
		timeout: FilterTimeout,
		cpu:     int(FilterCPU / time.Second),
		slots:   make(chan struct{}, size),
		live:    map[*filterProc]struct{}{},
	}
}

// run filters req's page in a filter process, for at most p.timeout. A
// response with more than maxContent bytes of content is garbage. The
// error is *filterEnd when the process died or was killed (ctx done, the
// deadline, a limit), or ctx's or the pool's error when no process could
// be had. A process that ended by itself before it acknowledged the
// request (killed from outside while idle, say) did not run the filters:
// it is reaped and the page given, once, to another.
func (p *filterPool) run(ctx context.Context, req filterRequest, maxContent int64) (filterResponse, error) {
	resp, unseen, err := p.runOnce(ctx, req, maxContent)
	if unseen {
		resp, _, err = p.runOnce(ctx, req, maxContent)
	}
	return resp, err
}

// runOnce is one try of run; unseen reports that its process ended by
// itself before it acknowledged the request, and that ctx is not done.
func (p *filterPool) runOnce(ctx context.Context, req filterRequest, maxContent int64) (resp filterResponse, unseen bool, err error) {
	c, err := p.get(ctx)
	if err != nil {
		return filterResponse{}, false, err
	}
	deadline := time.Now().Add(p.timeout)
	stop := context.AfterFunc(ctx, func() { c.kill(killCancel) })
	_ = c.in.SetWriteDeadline(deadline)
	_ = c.out.SetReadDeadline(deadline)
	err = writeRequest(c.in, req)
	acked := false
	if err == nil {
		var ack [1]byte
		if _, err = io.ReadFull(c.out, ack[:]); err == nil && ack[0] != ackRequest {
			err = errBadFrame
		}
		acked = err == nil
	}
	if err == nil {
		resp, err = readResponse(c.out, req, maxContent)
	}
	cancelled := !stop()
	if err == nil {
		if cancelled {
			p.discard(c)
		} else {
			p.put(c)
		}
		return resp, false, nil
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.kill(killDeadline)
	case errors.Is(err, errBadFrame):
		c.kill(killBroken)
	default:
		c.kill(killNone) // it ended by itself (its pipe closed): its end says how
	}
	end := p.discard(c)
	p.died(&end)
	unseen = !acked && end.why == killNone && ctx.Err() == nil
	return filterResponse{}, unseen, &end
}

// Error says how the process ended, in numbers: never shown to a caller
// ([Fetcher.filterError] turns it into the target's error).
func (e *filterEnd) Error() string {
	return fmt.Sprintf("filter process ended: reason %d, exit code %d, signal %d", e.why, e.code, e.signal)
}

// FilterDeathReasons are the reasons a filter process's death is counted
// under ([Fetcher.FilterDeaths]), each a fixed word: "timeout" (killed at
// FilterTimeout), "cpu" (past FilterCPU), "memory" (past its memory
// limit), "broken" (it answered garbage, killed), "crashed" (it died by
// itself, or by a signal the fetcher did not send: a kill from outside,
// the system out of memory). The first three are a page's filters passing
// a limit; the last two are not any page's doing.
var FilterDeathReasons = [...]string{"timeout", "cpu", "memory", "broken", "crashed"}

// deathReason is the index in FilterDeathReasons of end's reason, or -1
// for a process the fetcher killed because its fetch was cancelled or the
// fetcher closed. It classifies as [Fetcher.filterError] does.
func deathReason(end *filterEnd) int {
	switch {
	case end.why == killCancel, end.why == killClosed:
		return -1
	case end.why == killDeadline:
		return 0
	case end.why == killBroken:
		return 3
	case end.code == childExitCPU || cpuSignal(end.signal):
		return 1
	case end.oom || oomText(end.stderr):
		return 2
	}
	return 4
}

// died counts a process that ended as end.
func (p *filterPool) died(end *filterEnd) {
	if i := deathReason(end); i >= 0 {
		p.deaths[i].Add(1)
	}
}

// get returns an idle process, or starts one, once fewer than size run
// pages. An idle process found ended is reaped, and not returned.
func (p *filterPool) get(ctx context.Context) (*filterProc, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, errPoolClosed
	}
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !pipeHungUp(c.out) {
			p.mu.Unlock()
			return c, nil
		}
		// It ended while idle (killed from outside): reap it, try the next.
		p.mu.Unlock()
		end := p.reap(c)
		p.died(&end)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			<-p.slots
			return nil, errPoolClosed
		}
	}
	p.reaped.Add(1)
	p.mu.Unlock()
	c, err := p.start(ctx)
	if err != nil {
		<-p.slots
		return nil, err
	}
	p.mu.Lock()
	p.live[c] = struct{}{}
	closed := p.closed
	p.mu.Unlock()
	if closed {
		c.kill(killClosed)
		p.discard(c)
		return nil, errPoolClosed
	}
	return c, nil
}

// put makes c idle, for the next page.
func (p *filterPool) put(c *filterProc) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.discard(c)
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	<-p.slots
}

// discard kills and reaps c, which held a slot, and frees the slot.
func (p *filterPool) discard(c *filterProc) filterEnd {
	end := p.reap(c)
	<-p.slots
	return end
}

// reap kills c (if it has not ended), waits for it, removes its cgroup,
// and says how it ended.
func (p *filterPool) reap(c *filterProc) filterEnd {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	_ = c.errs.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	tail, _ := io.ReadAll(io.LimitReader(c.errs, maxStderr))
	_ = c.in.Close()
	_ = c.out.Close()
	_ = c.errs.Close()
	end := filterEnd{why: killReason(c.why.Load()), code: c.cmd.ProcessState.ExitCode(), stderr: tail}
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		end.signal = ws.Signal()
	}
	if c.cgroup != nil {
		end.oom = c.cgroup.ooms(c.cgdir) > 0
		c.cgroup.remove(c.cgdir)
	}
	p.mu.Lock()
	delete(p.live, c)
	p.mu.Unlock()
	p.reaped.Done()
	return end
}

// start starts a filter process, confines it (a memory cgroup, or
// RLIMIT_AS once it is ready) and waits for it to say it is ready. The
// caller has counted it in p.reaped; start counts it out if it fails.
func (p *filterPool) start(ctx context.Context) (*filterProc, error) {
	if !hookCalled.Load() {
		p.reaped.Done()
		return nil, errNoHook
	}
	exe, err := selfExecutable()
	if err != nil {
		p.reaped.Done()
		return nil, fmt.Errorf("filter process: %w", err)
	}
	var fds [6]*os.File // inR, inW, outR, outW, errR, errW
	for i := 0; i < len(fds); i += 2 {
		if fds[i], fds[i+1], err = os.Pipe(); err != nil {
			for _, f := range fds[:i] {
				_ = f.Close()
			}
			p.reaped.Done()
			return nil, fmt.Errorf("filter process: %w", err)
		}
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{"siftbatch-filter"}
	cmd.Env = []string{
		filterChildEnv + "=1",
		filterMemoryEnv + "=" + strconv.FormatInt(p.memory, 10),
		filterCPUEnv + "=" + strconv.Itoa(p.cpu),
		"GOTRACEBACK=none", // a fatal error's first line tells why; no stacks
	}
	cmd.Env = append(cmd.Env, p.env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = fds[0], fds[3], fds[5]
	cmd.SysProcAttr = childProcAttr()
	err = cmd.Start()
	_, _, _ = fds[0].Close(), fds[3].Close(), fds[5].Close()
	if err != nil {
		_, _, _ = fds[1].Close(), fds[2].Close(), fds[4].Close()
		p.reaped.Done()
		return nil, fmt.Errorf("filter process: %w", err)
	}
	c := &filterProc{cmd: cmd, in: fds[1], out: fds[2], errs: fds[4]}
	if cg := findCgroup(); cg != nil && !p.rlimitOnly {
		if dir, err := cg.place(cmd.Process.Pid, p.memory); err == nil {
			c.cgroup, c.cgdir = cg, dir
		}
	}
	stop := context.AfterFunc(ctx, func() { c.kill(killCancel) })
	_ = c.out.SetReadDeadline(time.Now().Add(startTimeout))
	err = readReady(c.out)
	if !stop() {
		err = context.Cause(ctx)
	}
	if err == nil && c.cgroup == nil {
		err = limitAddressSpace(cmd.Process.Pid, p.memory)
	}
	if err != nil {
		c.kill(killBroken)
		end := p.reap(c)
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errors.Is(err, errStartEnded) {
			// It ended before it said it was ready: by its own exit, the
			// program's main ran in it; by a signal (not ours: it had
			// ended when we killed it), something else killed it.
			err = errNotReady
			if end.signal != 0 {
				err = errStartKilled
			}
		}
		return nil, fmt.Errorf("filter process did not start (exit code %d): %w", end.code, err)
	}
	return c, nil
}

// readReady reads a new filter process's first words from out, a byte at
// a time: nil once they are the ready word; errNotReady as soon as a byte
// differs from it (the program's main runs, and writes); errStartEnded at
// the end of out (the process ended first); errSlowStart past out's
// deadline, with nothing else said. How long the process takes never
// makes it errNotReady: a loaded machine only delays its words.
func readReady(out io.Reader) error {
	var b [1]byte
	for i := range len(magicReady) {
		if _, err := io.ReadFull(out, b[:]); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return errSlowStart
			}
			return errStartEnded
		}
		if b[0] != magicReady[i] {
			return errNotReady
		}
	}
	return nil
}

// close kills every process, idle or running a page (its fetch fails),
// and waits until all are reaped.
func (p *filterPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	for c := range p.live {
		c.kill(killClosed)
	}
	p.mu.Unlock()
	for _, c := range idle {
		p.reap(c)
	}
	p.reaped.Wait()
}

// pids returns the process ids of the live filter processes.
func (p *filterPool) pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for c := range p.live {
		out = append(out, c.cmd.Process.Pid)
	}
	return out
}

// sandbox names the memory limit a new filter process gets: "cgroup v2",
// "cgroup v1", or "rlimit" (RLIMIT_AS).
func (p *filterPool) sandbox() string {
	if cg := findCgroup(); cg != nil && !p.rlimitOnly {
		return cg.sandboxName()
	}
	return "rlimit"
}

// oomTexts are what a Go process's fatal error says when the memory it
// asked for was refused (an mmap that failed under RLIMIT_AS; the last two
// are the race detector's).
var oomTexts = [][]byte{
	[]byte("out of memory"),
	[]byte("cannot allocate memory"),
	[]byte("failed to create new OS thread"),
	[]byte("too many address space collisions"),
	[]byte("ThreadSanitizer failed to allocate"),
}

// oomText reports whether a filter process's standard error says that it
// ran out of memory.
func oomText(stderr []byte) bool {
	for _, t := range oomTexts {
		if bytes.Contains(stderr, t) {
			return true
		}
	}
	return false
}
