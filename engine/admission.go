package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/persistence"
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

// TargetsHash returns the hash of the targets of caller's job id (hex),
// as a submission with an idempotency key of the caller's own gives it to
// [Admission.Admit]: an [Admission] binds the key to it. A job that is not
// caller's (or is gone) is an error wrapping [ErrNotFound]. It reads the
// job's target specs, not their results; it never writes; safe for
// concurrent use.
func (p Peer) TargetsHash(caller, id string) (string, error) {
	if p.r == nil {
		return "", noRunner("targets hash")
	}
	j, ts, err := p.r.store.TargetStatuses(id)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return "", fmt.Errorf("targets hash: %w", ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("targets hash: %w", err)
	case j.Caller != caller:
		return "", fmt.Errorf("targets hash: %w", ErrNotFound)
	}
	return targetsHash(ts), nil
}

// targetsHash is the hash of targets' URLs and options (their stored
// JSON), each length-prefixed, in order (hex SHA-256): the same for the
// targets of a submission and the specs stored from them.
func targetsHash(targets []persistence.TargetRecord) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	for i := range targets {
		field([]byte(targets[i].URL))
		field(targets[i].Options)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Config returns the runner's Config as it runs: every zero field
// defaulted. Safe for concurrent use.
func (r *Runner) Config() Config {
	c := r.cfg
	c.NodeTag = slices.Clone(c.NodeTag)
	return c
}
