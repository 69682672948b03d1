package persistence

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
)

// What a read of a job's targets need not read again. A job's specs row
// (its targets' URLs and options) is written once, by CreateJob, and never
// changed; once the job is settled, its outcome rows are final too (the
// row that settles a job is written after every outcome of it, and nothing
// writes an outcome of a settled job): yet every poll decoded the specs
// again, a string per URL, read them from the value log on disk (they are
// over the value threshold from a dozen targets on), and walked the
// outcome rows.
//
// So the store keeps the specs rows it has decoded, each with the Badger
// version of the row it was decoded from, and, once a read has seen the
// job settled, its targets' statuses (not their results). A read still
// reads the job's row and looks the specs row's key up in its own
// transaction, so a job deleted, or deleted and written again under the
// same id (a new specs row: a new version), reads as that transaction has
// it; it decodes the specs only if the version differs from the one kept,
// and walks the outcomes only if the job is not settled or its statuses
// are not kept. The memory is bounded (specsCacheBytes); the rows of a
// deleted job stay until they are pushed out.

// specsCacheBytes bounds what the store keeps: about 1,500 jobs of 32
// targets with 40-byte URLs, settled and read (half as many of them when
// their statuses are kept too); a job bigger than an eighth of it (of
// thousands of targets) is read whole at every read.
const specsCacheBytes = 4 << 20

// specsCache is a Store's decoded specs rows, by job id. Its zero value is
// empty and ready. Safe for concurrent use.
type specsCache struct {
	mu    sync.Mutex
	m     map[[idLen]byte]*specsEntry
	order [][idLen]byte // insertion order: the oldest first
	bytes int           // the sizes of the entries in m
}

// specsEntry is one decoded specs row.
type specsEntry struct {
	version uint64         // the Badger version of the row it was decoded from
	targets []TargetRecord // pending, Idx 0 to n-1; never handed out: copied
	// settled is the job's targets as a read of it settled found them, but
	// their results (Result nil); nil until then. Set once; copied.
	settled atomic.Pointer[[]TargetRecord]
	size    int  // an estimate of the memory it holds; under the cache's mu
	used    bool // read since it was kept or last passed over; under mu
}

// targetRecordSize is the memory a TargetRecord takes, its bytes apart.
const targetRecordSize = int(unsafe.Sizeof(TargetRecord{}))

// recordsSize estimates the memory ts holds.
func recordsSize(ts []TargetRecord) int {
	n := len(ts) * targetRecordSize
	for i := range ts {
		n += len(ts[i].URL) + len(ts[i].Options) + len(ts[i].Error) + len(ts[i].Hint)
	}
	return n
}

// get returns the entry of job id's row at version, if kept.
func (c *specsCache) get(id [idLen]byte, version uint64) *specsEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || e.version != version {
		return nil
	}
	e.used = true
	return e
}

// put keeps e, job id's row, unless it is too big, in place of the row
// kept before, if any; then it makes room.
func (c *specsCache) put(id [idLen]byte, e *specsEntry) {
	e.size = 64 + recordsSize(e.targets)
	if e.size > specsCacheBytes/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[idLen]byte]*specsEntry)
	}
	if old, ok := c.m[id]; ok {
		c.bytes -= old.size
	} else {
		c.order = append(c.order, id)
	}
	c.m[id] = e
	c.bytes += e.size
	c.makeRoom(e)
}

// settle keeps ts, the statuses of job id's targets once settled, in its
// entry e (ts is e's from now on), if e is still kept and holds none yet;
// then it makes room. ts too big is not kept.
func (c *specsCache) settle(id [idLen]byte, e *specsEntry, ts []TargetRecord) {
	size := recordsSize(ts)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[id] != e || e.settled.Load() != nil || e.size+size > specsCacheBytes/8 {
		return
	}
	e.settled.Store(&ts)
	e.size += size
	c.bytes += size
	c.makeRoom(e)
}

// makeRoom pushes the oldest entries out, but keep, until the rest fit; an
// entry read since it was kept, or since it was last passed over, gets a
// second chance: it goes to the back. c.mu is held.
func (c *specsCache) makeRoom(keep *specsEntry) {
	// Each turn drops an entry or takes the used mark off one, and keep is
	// at most an eighth of the budget: the loop ends.
	for c.bytes > specsCacheBytes && len(c.order) > 0 {
		oldest := c.order[0]
		c.order = c.order[1:]
		o := c.m[oldest]
		if o == keep || o.used {
			o.used = false
			c.order = append(c.order, oldest)
			continue
		}
		delete(c.m, oldest)
		c.bytes -= o.size
	}
}

// copyRecords returns a copy of ts for a reader, who owns it: the strings
// are shared, the options copied, all of them into one slice (each capped
// at its length, so that an append to one reallocates it).
func copyRecords(ts []TargetRecord) []TargetRecord {
	out := make([]TargetRecord, len(ts))
	copy(out, ts)
	n := 0
	for i := range out {
		n += len(out[i].Options)
	}
	if n == 0 {
		return out
	}
	opts := make([]byte, 0, n)
	for i := range out {
		if o := out[i].Options; o != nil {
			start := len(opts)
			opts = append(opts, o...)
			out[i].Options = opts[start:len(opts):len(opts)]
		}
	}
	return out
}

// readSpecs returns the entry of job id's specs row as txn has it, from
// the cache or decoded (and kept); nil if the job has no specs row.
func (s *Store) readSpecs(txn *badger.Txn, id [idLen]byte) (*specsEntry, error) {
	item, err := txn.Get(specsKey(id))
	if err != nil {
		return nil, err
	}
	if e := s.specs.get(id, item.Version()); e != nil {
		return e, nil
	}
	e := &specsEntry{version: item.Version()}
	err = item.Value(func(v []byte) error {
		e.targets, err = decodeSpecs(v)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.specs.put(id, e)
	return e, nil
}
