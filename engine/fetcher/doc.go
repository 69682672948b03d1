// Package fetcher is siftbatch's hardened HTTP fetcher: a [Fetcher] whose
// [Fetcher.Fetch] is an [engine.FetchFunc] that GETs a target's URL.
//
// It is hardened for URLs that agents hand over:
//
//   - Unless [Options.AllowPrivate], it refuses any address that is not
//     public (loopback, private, link-local, unspecified, and the other
//     special-purpose ranges), both when the URL is checked and again, at
//     dial time, for the address actually dialled, so that a name which
//     resolves differently the second time (DNS rebinding) is refused too.
//     Every redirect is checked the same way, and at most
//     [Options.MaxRedirects] are followed.
//   - Each fetch has a deadline ([Options.Timeout]) and keeps at most
//     [Options.MaxBody] body bytes (the rest is dropped; the result's meta
//     says "truncated").
//   - A 429 or 503 answer is an error wrapping [engine.ErrRetryLater], so
//     the runner tries the target again later; any other failure is an
//     [*engine.TargetError] with the HTTP status a single fetch would get
//     and a hint for the agent. No error carries the URL or its host.
//
// Target options: the fetcher honours grep (keep the lines an RE2 regular
// expression matches) and jq (run a jq program, with
// github.com/itchyny/gojq, on a JSON page); see [Fetcher.Fetch].
// [Fetcher.Honours] names them and [Fetcher.Check] checks their values,
// so that an HTTP handler can refuse the others, and bad values, at
// submit. Check parses and compiles them in the calling process, so their
// size is bounded first, for a check to cost a few MiB and a few ms at
// most: grep at most [MaxGrepLen] bytes (512) and [MaxGrepInstructions]
// compiled instructions (500), jq at most [MaxJQLen] bytes (4096) and
// [MaxJQDepth] levels of nesting (512), with at most [MaxJQAltBindings]
// (4096) alternatives times variables in a destructuring with ?//; a jq
// program that names getpath,
// setpath, delpaths, pick or fromstream, even in a string, is refused.
//
// # Filters run in a child process
//
// jq and grep run what callers send: a program can ask for gigabytes in
// one builtin call, an expression can take minutes on a page. So they
// never run in the embedding process: each page's filters run in a filter
// process, the program's own binary executed again (/proc/self/exe) with a
// marker in its environment, as Docker's reexec does. Its limits:
//
//   - memory: [Options.FilterMemory] (default 256 MiB), set by a memory
//     cgroup of its own, made under the process's own cgroup where it can
//     (cgroup v2 memory.max, with the memory controller enabled for the
//     cgroup's children, or cgroup v1 memory.limit_in_bytes; usually as
//     root), else by RLIMIT_AS: the child's address space once started
//     (a Go binary reserves about 1.2 GB, more under the race detector)
//     plus the limit. The child also sets its Go memory limit a little
//     under it (GOMEMLIMIT), so that its collector works harder first;
//   - time: [FilterTimeout] (1 s) for jq and grep together, after which
//     the child is killed (SIGKILL);
//   - CPU time: [FilterCPU] (2 s) per page, RLIMIT_CPU, a backstop;
//   - one thread of Go code (GOMAXPROCS 1), an empty environment, no
//     access to the fetch's network or the store.
//
// A target whose filters pass a limit fails with an [*engine.TargetError]
// that names it ("jq used more than 256 MiB of memory", "grep ran longer
// than 1s"): memory only when the child's cgroup counted a kill for
// memory, or (under RLIMIT_AS) the child's own last words say it ran out.
// A child that dies otherwise while it filters a page (killed from
// outside, a crash) fails that target "filters failed", with a hint to
// submit it again. The fetch's context being cancelled
// ([engine.Runner.Cancel], [engine.Runner.Close]) kills the child at once.
// A few children ([Options.FilterProcs]) stay warm between pages; one that
// broke a limit, or died, is reaped and a new one started when a page
// needs it. A warm child found dead, or that dies before it acknowledges
// a page, never fails that page: the page is given, once, to another.
// [Fetcher.Close] kills them and waits for them. A target without jq and
// grep involves no child.
//
// The embedder's one call: [RunFilterChild], first thing in main, and in
// the TestMain of every package whose tests make a Fetcher:
//
//	func main() {
//		fetcher.RunFilterChild() // in a filter process: serves, then exits
//		…
//	}
//
// A filter process is the program itself: what main does before the call,
// each filter process does too. In a program that has not made the call a
// Fetcher starts no filter process: its targets with jq or grep fail
// "filters unavailable: the program does not call fetcher.RunFilterChild
// at the top of main" (the others are fetched as usual); one that makes
// it late, after main has started its work, runs that work again in
// each filter process. The fetcher knows such a process by what it does,
// never by how long it takes (a loaded machine only delays a process):
// one that writes anything but the ready word on its standard output, or
// ends before it said it, is killed and reaped, and its target fails
// "filters unavailable: the program does not call fetcher.RunFilterChild
// at the top of main". One that says nothing for 30s (one starts in about
// 5 ms) is killed too, and its target fails 503 "filters unavailable: the
// filter process did not start within 30s", to be submitted again.
//
// Outside Linux there is no hard memory or CPU limit (no cgroup, no
// prlimit): only the deadline and the Go memory limit.
package fetcher
