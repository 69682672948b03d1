package persistence

// The key layout. Every key the store writes is built here, and nowhere else.
//
// Job ids are 16 random bytes (hex in the API, raw in keys); times are unix
// nanoseconds as big-endian uint64, so that byte order is time order.
//
//	j <id:16>                    → job row (encodeJob)
//	t <id:16>                    → target specs (encodeSpecs): every target's URL and options, in idx order, written once; absent: no targets
//	r <id:16> <idx:2>            → target outcome (encodeOutcome), written once it is stored; absent: pending; idx big-endian uint16
//	b <id:16> <idx:2> <chunk:2>  → a chunk of target idx's result (raw bytes), when the outcome says the result is not inline; chunk big-endian uint16, from 0
//	i <key:32>                   → id:16 — idempotency: SHA-256(name \x00 targets JSON) → the newest job with it
//	l <id:16>                    → "" — unsettled jobs: live, or cancelled with a target in flight; reaped by New
//	x <lease:8> <id:16>          → "" — settled jobs by lease, for the sweep (lease + TTL ≤ now)
//	a <created:8> <id:16>        → "" — settled jobs by age, for eviction (oldest first)
//	c <caller:8> <^created:8> <^id:16> → "" — a caller's jobs, newest first: caller is SHA-256(caller name)[:8]; created and id bit-inverted, so that key order is created, then id, both descending
//	e <^created:8> <^id:16>      → "" — every job, newest first (for listing across callers): created and id bit-inverted, as in c keys
//	m stored                     → uint64 big-endian: stored bytes in all, what MaxBytes bounds: the value bytes of every job's rows (j, t, r, and the b rows its r rows name; stored.go); written with every write that moves it; absent: a store written before it, counted once by Open (a walk of every j, t and r row), which then writes it
//	m bytes                      → uint64 big-endian: stored result bytes in all, before m stored (results only); Open deletes it when it writes m stored
//	m callers                    → "" — every job has its c key (the index came after format 2): Open built it, and checks it at each Open (Store.indexes)
//	m every                      → "" — every job has its e key (the index came with format 4): Open built it, and checks it at each Open (Store.indexes)
//	n <tag:4>                    → 1 <node name> — a cluster node met, by its tag (the first 4 bytes of its jobs' ids): format byte 1, then the name; at most MaxNodeTags keys (nodetags.go)
//
// A result longer than 512 bytes is not in its r row but in b rows of
// 512 KiB (records.go), so that reading a job's statuses reads no result.
// Its chunks are written first, in transactions of their own (a 16 MiB
// result does not fit one in memory), then the r row, which is the commit
// point: a reader takes a result's chunks only from an r row that says how
// long it is, and ignores chunks without one (a crash between the two, or
// a failed write, can leave them: they are written again by the next try,
// and deleted with the job, which deletes every b key under its id). The
// byte total (m stored) counts a result's chunks once its r row commits.
//
// A job is "settled" once it is terminal and no target of it is in flight:
// only settled jobs are in x and a, so the sweep and eviction never touch a
// job that an actor still owns. Unsettled jobs are in l instead.
//
// An unsettled job's row is written when its status changes (queued,
// running, cancelled), on Touch, and by the write that settles it; not for
// every target. Its progress (targets done and failed, result bytes) and its
// lease are then the ones its r rows give (each outcome holds the time it
// was stored): the readers of a row count them (recount, in reads.go). A
// settled job's row is complete.
//
// Values: see records.go. Each row starts with a format version byte.

import (
	"crypto/sha256"
	"encoding/binary"
)

const (
	prefixJob     = 'j'
	prefixSpecs   = 't'
	prefixOutcome = 'r'
	prefixResult  = 'b'
	prefixIdem    = 'i'
	prefixLive    = 'l'
	prefixLease   = 'x'
	prefixAge     = 'a'
	prefixMeta    = 'm'
	prefixCaller  = 'c'
	prefixNode    = 'n'
	prefixEvery   = 'e'
	idLen         = 16
	idemKeyLen    = 32
	targetKeyLen  = 1 + idLen + 2
	chunkKeyLen   = targetKeyLen + 2
	indexKeyLen   = 1 + 8 + idLen
	jobKeyLen     = 1 + idLen
	idemKeyPrefix = 1 + idemKeyLen
	callerHashLen = 8
	// callerCursorLen is a caller-index key past its prefix: what
	// CallerJobs's cursor holds.
	callerCursorLen = 8 + idLen
	callerKeyLen    = 1 + callerHashLen + callerCursorLen
	everyKeyLen     = 1 + callerCursorLen
	nodeTagLen      = 4
	nodeKeyLen      = 1 + nodeTagLen
)

var (
	keyStored      = []byte{prefixMeta, 's', 't', 'o', 'r', 'e', 'd'}
	keyResultBytes = []byte{prefixMeta, 'b', 'y', 't', 'e', 's'} // before keyStored
	keyCallers     = []byte{prefixMeta, 'c', 'a', 'l', 'l', 'e', 'r', 's'}
	keyEvery       = []byte{prefixMeta, 'e', 'v', 'e', 'r', 'y'}
)

func jobKey(id [idLen]byte) []byte {
	return appendJobKey(make([]byte, 0, jobKeyLen), id)
}

func appendJobKey(b []byte, id [idLen]byte) []byte {
	return append(append(b, prefixJob), id[:]...)
}

func liveKey(id [idLen]byte) []byte {
	k := make([]byte, 0, jobKeyLen)
	return append(append(k, prefixLive), id[:]...)
}

func specsKey(id [idLen]byte) []byte {
	k := make([]byte, 0, jobKeyLen)
	return append(append(k, prefixSpecs), id[:]...)
}

// outcomesPrefix is the prefix of a job's r keys.
func outcomesPrefix(id [idLen]byte) []byte {
	k := make([]byte, 0, targetKeyLen)
	return append(append(k, prefixOutcome), id[:]...)
}

// outcomeKey is an r key.
func outcomeKey(id [idLen]byte, idx int) []byte {
	return appendOutcomeKey(make([]byte, 0, targetKeyLen), id, idx)
}

// appendOutcomeKey appends an r key to b.
func appendOutcomeKey(b []byte, id [idLen]byte, idx int) []byte {
	b = append(append(b, prefixOutcome), id[:]...)
	return binary.BigEndian.AppendUint16(b, uint16(idx))
}

// resultsPrefix is the prefix of a job's b keys.
func resultsPrefix(id [idLen]byte) []byte {
	k := make([]byte, 0, chunkKeyLen)
	return append(append(k, prefixResult), id[:]...)
}

// chunkKey is a b key: chunk of target idx's result.
func chunkKey(id [idLen]byte, idx, chunk int) []byte {
	k := make([]byte, 0, chunkKeyLen)
	k = append(append(k, prefixResult), id[:]...)
	k = binary.BigEndian.AppendUint16(k, uint16(idx))
	return binary.BigEndian.AppendUint16(k, uint16(chunk))
}

// callerPrefix is the prefix of a caller's c keys.
func callerPrefix(caller string) []byte {
	h := sha256.Sum256([]byte(caller))
	k := make([]byte, 0, callerKeyLen)
	return append(append(k, prefixCaller), h[:callerHashLen]...)
}

// callerKey is a job's c key.
func callerKey(caller string, created int64, id [idLen]byte) []byte {
	return appendNewestFirst(callerPrefix(caller), created, id)
}

// appendNewestFirst appends created and id bit-inverted: the position of
// a job in the c and e indexes, and their cursors.
func appendNewestFirst(k []byte, created int64, id [idLen]byte) []byte {
	k = binary.BigEndian.AppendUint64(k, ^uint64(created))
	for _, b := range id {
		k = append(k, ^b)
	}
	return k
}

// everyKey is a job's e key.
func everyKey(created int64, id [idLen]byte) []byte {
	return appendNewestFirst(append(make([]byte, 0, everyKeyLen), prefixEvery), created, id)
}

// newestFirstID returns the id at the end of a c or e key of length n.
func newestFirstID(k []byte, n int) ([idLen]byte, bool) {
	var id [idLen]byte
	if len(k) != n {
		return id, false
	}
	for i, b := range k[n-idLen:] {
		id[i] = ^b
	}
	return id, true
}

// nodeKey is a node tag's n key.
func nodeKey(tag [nodeTagLen]byte) []byte {
	k := make([]byte, 0, nodeKeyLen)
	return append(append(k, prefixNode), tag[:]...)
}

func idemKey(key [idemKeyLen]byte) []byte {
	k := make([]byte, 0, idemKeyPrefix)
	return append(append(k, prefixIdem), key[:]...)
}

func indexKey(prefix byte, nanos int64, id [idLen]byte) []byte {
	k := make([]byte, 0, indexKeyLen)
	k = append(k, prefix)
	k = binary.BigEndian.AppendUint64(k, uint64(nanos))
	return append(k, id[:]...)
}

// indexID returns the id at the end of an x or a index key.
func indexID(k []byte) ([idLen]byte, bool) {
	var id [idLen]byte
	if len(k) != indexKeyLen {
		return id, false
	}
	copy(id[:], k[1+8:])
	return id, true
}
