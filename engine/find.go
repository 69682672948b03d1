package engine

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sift/batch/persistence"
)

// Short ids: what the dashboard, the CLI and the lists show of a job id,
// and what a person types to find a job again.

// The length of a short id, and the bounds of a prefix [Runner.FindJobs]
// takes.
const (
	ShortIDLen     = 8
	MinShortPrefix = 4
)

// DefaultFindLimit and MaxFindLimit bound [Runner.FindJobs]'s limit.
const (
	DefaultFindLimit = 20
	MaxFindLimit     = 100
)

// findScan is how many job rows one walk of FindJobs looks at, at most:
// with a prefix of 4 hex digits, a store of 650 million jobs before it
// bites (ids are random past a node's tag).
const findScan = 10_000

// maxKnownTags bounds the node tags a process remembers for ShortID.
const maxKnownTags = 4 * persistence.MaxNodeTags

// knownTags are the cluster node tags this process knows: a runner's own
// ([Config.NodeTag]), the ones its store holds ([Peer.NodeTags]) and the
// ones it stores ([Peer.RememberNodeTag]). ShortID reads them.
var knownTags struct {
	mu   sync.RWMutex
	tags map[[NodeTagLen]byte]struct{}
}

// rememberTag adds tag to the tags ShortID knows (up to maxKnownTags).
func rememberTag(tag []byte) {
	if len(tag) != NodeTagLen {
		return
	}
	t := [NodeTagLen]byte(tag)
	knownTags.mu.Lock()
	defer knownTags.mu.Unlock()
	if knownTags.tags == nil {
		knownTags.tags = make(map[[NodeTagLen]byte]struct{})
	}
	if len(knownTags.tags) < maxKnownTags {
		knownTags.tags[t] = struct{}{}
	}
}

// tagged reports whether raw begins with a node tag this process knows.
func tagged(raw []byte) bool {
	if len(raw) < NodeTagLen {
		return false
	}
	knownTags.mu.RLock()
	defer knownTags.mu.RUnlock()
	_, ok := knownTags.tags[[NodeTagLen]byte(raw[:NodeTagLen])]
	return ok
}

// tagList returns the node tags this process knows.
func tagList() [][NodeTagLen]byte {
	knownTags.mu.RLock()
	defer knownTags.mu.RUnlock()
	out := make([][NodeTagLen]byte, 0, len(knownTags.tags))
	for t := range knownTags.tags {
		out = append(out, t)
	}
	return out
}

// ShortID returns the short form of a job id that lists show and people
// type: its first 8 hex digits; or, for an id that begins with the tag of
// a cluster node this process knows (a runner's [Config.NodeTag], or a tag
// its store holds: in a cluster every id of a node begins with the node's
// 4-byte tag), hex digits 9 to 16, since the first 8 are the same for
// every job of the node. A string that is not a job id (32 lowercase hex
// digits) gives its first 8 bytes, or itself when shorter. Safe for
// concurrent use.
func ShortID(id string) string {
	raw, ok := parseJobID(id)
	if !ok {
		return id[:min(len(id), ShortIDLen)]
	}
	if tagged(raw[:]) {
		return id[2*NodeTagLen : 2*NodeTagLen+ShortIDLen]
	}
	return id[:ShortIDLen]
}

// parseJobID decodes a job id: 32 lowercase hex digits.
func parseJobID(id string) ([16]byte, bool) {
	var raw [16]byte
	if len(id) != 32 || !isLowerHex(id) {
		return raw, false
	}
	_, err := hex.Decode(raw[:], []byte(id))
	return raw, err == nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// FindJobs returns the jobs whose short id ([ShortID]) starts with
// prefix, or, for a prefix longer than a short id, whose whole id does:
// caller's jobs only, or every caller's when caller is "" (for an
// administrator: FindJobs does not check who asks). Newest first (by
// creation time, then id), at most limit (0 means DefaultFindLimit; at
// most MaxFindLimit). A prefix is 4 to 32 hex digits, upper or lower
// case; anything else, or a bad limit, is an error wrapping [ErrBadList].
// Expired jobs are never found. It seeks the store's job rows by id
// (once, and once per known node tag), reading each candidate's row: with
// random ids a short prefix names few jobs, and each walk looks at most
// 10,000 rows. It never writes; safe for concurrent use.
func (r *Runner) FindJobs(caller, prefix string, limit int) ([]Job, error) {
	switch {
	case limit < 0 || limit > MaxFindLimit:
		return nil, fmt.Errorf("%w: limit must be from 1 to %d", ErrBadList, MaxFindLimit)
	case limit == 0:
		limit = DefaultFindLimit
	}
	prefix = strings.ToLower(prefix)
	if len(prefix) < MinShortPrefix || len(prefix) > 32 || !isLowerHex(prefix) {
		return nil, fmt.Errorf("%w: an id prefix is %d to 32 hex digits", ErrBadList, MinShortPrefix)
	}
	even, err := hex.DecodeString(prefix[:len(prefix)&^1])
	if err != nil {
		return nil, fmt.Errorf("%w: an id prefix is %d to 32 hex digits", ErrBadList, MinShortPrefix)
	}
	long := len(prefix) > ShortIDLen
	var found []persistence.JobRecord
	keep := func(rec *persistence.JobRecord) bool {
		if caller != "" && rec.Caller != caller {
			return false
		}
		if long {
			if !strings.HasPrefix(rec.ID, prefix) {
				return false
			}
		} else if !strings.HasPrefix(ShortID(rec.ID), prefix) {
			return false
		}
		j, ok := r.readable(rec)
		if ok {
			*rec = j
		}
		return ok
	}
	walk := func(raw []byte) error {
		recs, _, err := r.store.JobsByIDPrefix(raw, findScan, keep)
		found = append(found, recs...)
		return err
	}
	if err := walk(even); err != nil {
		return nil, fmt.Errorf("find jobs: %w", err)
	}
	if !long {
		for _, tag := range tagList() {
			if err := walk(append(tag[:], even...)); err != nil {
				return nil, fmt.Errorf("find jobs: %w", err)
			}
		}
	}
	slices.SortFunc(found, func(a, b persistence.JobRecord) int {
		return cmp.Or(cmp.Compare(b.Created, a.Created), strings.Compare(b.ID, a.ID))
	})
	found = slices.CompactFunc(found, func(a, b persistence.JobRecord) bool { return a.ID == b.ID })
	jobs := make([]Job, 0, min(len(found), limit))
	for i := range found[:min(len(found), limit)] {
		jobs = append(jobs, toJob(&found[i]))
	}
	return jobs, nil
}
