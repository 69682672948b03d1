package engine

import (
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/sift/batch/engine/batchtype"
)

// Admission admits a runner's new jobs against caps wider than the runner
// (a cluster's): see [batchtype.Admission], where it is defined.
type Admission = batchtype.Admission

// AdmittedJob is one of a caller's jobs that an [Admission] counts: a live
// one (against JobsPerCaller), or one an idempotent resubmit may reuse.
type AdmittedJob struct {
	ID       string
	Key      string // the submission's idempotency key, hex
	Live     bool   // queued or running
	Reusable bool   // queued, running, done or partial, and not expired
}

// Admitted returns caller's jobs that are live or reusable, as an
// [Admission] rebuilding its count asks each runner of a cluster for them.
// A live job reads as its actor holds it. It never writes; safe for
// concurrent use. It walks the caller's index: a seek and a point read per
// job of the caller.
func (p Peer) Admitted(caller string) ([]AdmittedJob, error) {
	if p.r == nil {
		return nil, noRunner("admitted jobs")
	}
	r := p.r
	var out []AdmittedJob
	now := r.cfg.Now().UnixNano()
	var after []byte
	for {
		recs, next, err := r.store.CallerJobs(caller, after, MaxListLimit, nil)
		if err != nil {
			return nil, fmt.Errorf("admitted jobs: %w", err)
		}
		for i := range recs {
			j, ok := r.readable(&recs[i])
			if !ok {
				continue
			}
			live, reusable := IsLive(j.Status), j.Reusable(r.cfg.TTL, now)
			if live || reusable {
				out = append(out, AdmittedJob{ID: j.ID, Key: hex.EncodeToString(j.Key[:]), Live: live, Reusable: reusable})
			}
		}
		if next == nil {
			return out, nil
		}
		after = next
	}
}

// Reusable reports whether job id is caller's, was submitted with the
// idempotency key key (hex), and may be reused by a resubmit now (SPEC
// rule 2: queued, running, done or partial, its lease not expired). Safe
// for concurrent use.
func (p Peer) Reusable(caller, key, id string) bool {
	if p.r == nil {
		return false
	}
	r := p.r
	rec, err := r.store.Job(id)
	if err != nil {
		return false
	}
	j, ok := r.readable(&rec)
	return ok && j.Caller == caller && hex.EncodeToString(j.Key[:]) == key &&
		j.Reusable(r.cfg.TTL, r.cfg.Now().UnixNano())
}

// Config returns the runner's Config as it runs: every zero field
// defaulted. Safe for concurrent use.
func (r *Runner) Config() Config {
	c := r.cfg
	c.NodeTag = slices.Clone(c.NodeTag)
	return c
}
