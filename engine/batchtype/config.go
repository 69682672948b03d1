// Package batchtype holds the types that package engine, package actors
// and package persistence share, defined once: the runner's [Config], its
// [Hooks], the errors, and the status words with their rules ([JobStatus],
// [IsLive], [TerminalStatus], [TargetState]). Users import them through
// package engine, which re-exports each one under the same name with the
// same doc (engine.Config is batchtype.Config); the package exists only so
// that the actors and the store, which engine imports, can use them too
// without a copy (the pattern of river's rivertype). It imports nothing of
// the project's.
package batchtype

import (
	"bytes"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// The defaults a zero [Config] field takes.
const (
	DefaultTTL           = 24 * time.Hour
	DefaultTargetsPerJob = 32
	MaxTargetsPerJob     = 1<<16 - 1
	DefaultJobsPerCaller = 1
	DefaultJobsTotal     = 8
	DefaultWorkers       = 1
	MaxWorkers           = 2
	DefaultMaxBytes      = 64 << 20
	DefaultRetryWait     = 2 * time.Second
	DefaultRetryFor      = 10 * time.Minute
	// DefaultDiskReserve (73.6 MiB) is what the store takes when it opens
	// its next files at the sizes it opens Badger with: 2 memtable logs of
	// 20.8 MiB and a value-log file of 32 MiB, allocated at once.
	DefaultDiskReserve = 77175192
)

// Config tunes a runner (engine.Runner). The zero value is ready to use: each zero field
// takes the default its comment gives; a negative field makes engine.New fail.
type Config struct {
	// TTL is how long a finished job stays readable after its lease (the
	// later of its last stored target, its last Touch and its creation).
	// Default [DefaultTTL] (24h).
	TTL time.Duration
	// TargetsPerJob caps the targets of one job. Default 32; at most
	// [MaxTargetsPerJob].
	TargetsPerJob int
	// JobsPerCaller caps the live (queued or running) jobs per Caller.Name.
	// Default 1.
	JobsPerCaller int
	// JobsTotal caps the live jobs in all. Default 8.
	JobsTotal int
	// Workers is how many targets are fetched at once: 1 or 2. Default 1;
	// above 2 means 2.
	Workers int
	// MaxBytes caps the stored bytes in all: every row of every job (its
	// row, its targets' URLs and options, their outcomes with errors and
	// hints, their results), so that failed and cancelled jobs count too.
	// Past it the oldest finished jobs are deleted, after each write that
	// adds bytes or settles a job; live jobs never are, so their rows may
	// come on top. Default 64 MiB.
	MaxBytes int64
	// RetryWait is the pause before a busy target is tried again, and before
	// a job that has ended writes again what a failed store write left
	// unwritten; measured by a real timer. Default 2s.
	RetryWait time.Duration
	// RetryFor is how long, by [Config.Now], one target may keep coming back
	// busy before it is stored failed. Default 10m.
	RetryFor time.Duration
	// Hooks observe the runner; see [Hooks].
	Hooks Hooks
	// Now is the clock for leases, TTL, CreatedAt and RetryFor. Default
	// time.Now.
	Now func() time.Time
	// NodeTag, in a cluster, is this node's tag: the first 4 bytes of every
	// job id it creates, so that any node can tell which node holds a job
	// (package github.com/sift/batch/engine/cluster computes it from the
	// node's name). nil (the default, a single node): ids are 16 random
	// bytes. Any other length than 0 or 4 makes engine.New fail.
	NodeTag []byte
	// Admission, if set, admits each new job against caps wider than this
	// runner: see [Admission]. Default nil: the runner admits on its own.
	Admission Admission
	// Durability is what the runner's acknowledged writes survive: see
	// [DurabilityProcess] (the default) and [DurabilitySync]. Sync with a
	// store in memory makes engine.New fail.
	Durability Durability
	// DiskReserve is the free space, in bytes, the runner keeps on its
	// store's file system (a store on disk; measured with statfs every
	// second, and at once when the store's writes may have used up the
	// room above it). Below it Submit returns [ErrDiskFull], no new
	// target starts (running jobs are held, their targets pending, none
	// failed for it), and reads, lists, Touch and Cancel work as ever;
	// once there is room again the held jobs go on by themselves. The
	// writes in flight, cancels and settles go into the reserve. Default
	// [DefaultDiskReserve] (73.6 MiB); 1 keeps next to nothing.
	DiskReserve int64
	// TracerProvider, if set, traces every job with OpenTelemetry spans:
	// the job from its submit to its end, a child of the span in Submit's
	// context (the caller's trace), and each target as the job's child
	// (its wait in the rotation, its fetch, its store). The job's trace
	// context is kept in its stored row. Package
	// github.com/sift/batch/engine/tracing sets one up. Default nil: no
	// spans, at no cost.
	TracerProvider trace.TracerProvider
}

// Durability is what a runner's acknowledged writes survive: a job and its
// targets once Submit has returned its id, each target's outcome once the
// job's next target has started (or the job has ended), each status change
// once a reader can see it.
type Durability int

const (
	// DurabilityProcess (the zero value) answers a write once Badger has
	// committed it to its memory-mapped logs, without a sync. It survives
	// the process crashing or being killed (SIGKILL, an OOM kill, a panic):
	// the pages are the kernel's, which writes them back within about 30
	// seconds. A kernel crash or a power cut loses what was not written
	// back yet: a job answered 202 may be gone after the restart (a read
	// is then 404), a target done may run again. The store is never left
	// damaged by it: the restart reopens it as of some earlier moment.
	DurabilityProcess Durability = iota
	// DurabilitySync answers a write only once it is on stable storage (an
	// msync of Badger's logs, that is an fsync, after its commit): it
	// survives a process crash, a kernel crash and a power cut, as far as
	// the disk honours a flush. One sync covers a whole group commit of the
	// store's writer (every live job's outcome that came in meanwhile) and
	// each job's creation syncs on its own: Submit pays one sync, a target
	// a share of one. A Touch and a sweep are not synced (they are not
	// acknowledgements). Reads are unchanged. It needs a store on disk.
	DurabilitySync
)

// String returns "process" or "sync" (what serve's --durable sets).
func (d Durability) String() string {
	switch d {
	case DurabilityProcess:
		return "process"
	case DurabilitySync:
		return "sync"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// NodeTagLen is the length of a [Config.NodeTag].
const NodeTagLen = 4

// WithDefaults validates c and returns it with every zero field defaulted;
// the error names the field.
func (c Config) WithDefaults() (Config, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"TTL", int64(c.TTL)},
		{"TargetsPerJob", int64(c.TargetsPerJob)},
		{"JobsPerCaller", int64(c.JobsPerCaller)},
		{"JobsTotal", int64(c.JobsTotal)},
		{"Workers", int64(c.Workers)},
		{"MaxBytes", c.MaxBytes},
		{"RetryWait", int64(c.RetryWait)},
		{"RetryFor", int64(c.RetryFor)},
		{"DiskReserve", c.DiskReserve},
	} {
		if f.v < 0 {
			return c, fmt.Errorf("config %s must not be negative", f.name)
		}
	}
	if c.Durability != DurabilityProcess && c.Durability != DurabilitySync {
		return c, fmt.Errorf("config Durability must be DurabilityProcess or DurabilitySync, not %d", int(c.Durability))
	}
	if len(c.NodeTag) != 0 && len(c.NodeTag) != NodeTagLen {
		return c, fmt.Errorf("config NodeTag must be %d bytes or none", NodeTagLen)
	}
	c.NodeTag = bytes.Clone(c.NodeTag)
	if c.TargetsPerJob > MaxTargetsPerJob {
		return c, fmt.Errorf("config TargetsPerJob must be at most %d", MaxTargetsPerJob)
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TargetsPerJob == 0 {
		c.TargetsPerJob = DefaultTargetsPerJob
	}
	if c.JobsPerCaller == 0 {
		c.JobsPerCaller = DefaultJobsPerCaller
	}
	if c.JobsTotal == 0 {
		c.JobsTotal = DefaultJobsTotal
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Workers > MaxWorkers {
		c.Workers = MaxWorkers
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.RetryWait == 0 {
		c.RetryWait = DefaultRetryWait
	}
	if c.RetryFor == 0 {
		c.RetryFor = DefaultRetryFor
	}
	if c.DiskReserve == 0 {
		c.DiskReserve = DefaultDiskReserve
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
