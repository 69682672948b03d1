package persistence

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/skl"
)

// Options are the sizes at which a store on disk starts new Badger files.
// The zero value is [Open]'s. Smaller files make Badger start a new
// memtable (and its log), flush one to a table and start a new value-log
// file after fewer writes: the power-cut test (docs/RELIABILITY.md, "Power
// cuts: serve under load") uses them to see those files come and go within
// seconds of load. A store in memory ignores them.
//
// The sizes are not kept in the store: open a store with the sizes it was
// written with, or larger ones (a memtable log larger than the memtable
// it is replayed into does not open).
type Options struct {
	// MemTableSize is the size of a memtable, and of its log (NNNNN.mem),
	// at which Badger starts a new one and flushes the old one to a
	// table. Default 16 MiB; at least [MinMemTableSize]. The largest write
	// is 15% of it (values past 1 KiB count only a pointer).
	MemTableSize int64
	// ValueLogFileSize is the size of a value-log file (NNNNNN.vlog) at
	// which Badger starts a new one. Default 16 MiB; at least 1 MiB
	// (Badger's least: a result chunk of 512 KiB must fit), below 2 GiB.
	ValueLogFileSize int64
	// Durable says the store is opened for a durable runner
	// ([Store.SetDurable]). It decides one repair of what a power cut
	// left (recover.go): a listed level-0 table that is missing with no
	// memtable log left to replay is damage for a durable store (Open
	// refuses it with [ErrCorrupt]: every log's directory entry is synced
	// with its first write), and, for one written in the default mode,
	// whose directory is never synced, the expected loss of the writes
	// since the last sync: Open unlists it and counts it
	// ([Recovery.LostTables]). Default false.
	Durable bool
}

// MinMemTableSize is the least [Options.MemTableSize]: 15% of it (19.2
// KiB) holds the largest row the store writes inline (a value of 1 KiB
// and its key) many times over, and a group commit of several writes.
const MinMemTableSize = 128 << 10

// OpenWith is [Open] with the sizes of o (zero fields: Open's). A size out
// of its range is an error that names it, and opens nothing.
func OpenWith(dir string, o Options) (*Store, error) { return openWith(dir, o, false) }

// check refuses sizes out of range.
func (o Options) check() error {
	switch {
	case o.MemTableSize != 0 && o.MemTableSize < MinMemTableSize:
		return fmt.Errorf("open store: MemTableSize %d is below %d", o.MemTableSize, MinMemTableSize)
	case o.ValueLogFileSize != 0 && (o.ValueLogFileSize < 1<<20 || o.ValueLogFileSize >= 2<<30):
		return fmt.Errorf("open store: ValueLogFileSize %d is not in [1 MiB, 2 GiB)", o.ValueLogFileSize)
	}
	return nil
}

// badger is badgerOptions with o's sizes, on disk.
func (o Options) badger(dir string, log badger.Logger) badger.Options {
	bo := badgerOptions(dir, log)
	if dir == "" {
		return bo
	}
	if o.MemTableSize > 0 {
		bo = bo.WithMemTableSize(o.MemTableSize)
	}
	if o.ValueLogFileSize > 0 {
		bo = bo.WithValueLogFileSize(o.ValueLogFileSize)
	}
	return bo
}

// groupBounds bound one group commit (writer_group.go): its writes and its
// rows' bytes.
type groupBounds struct{ writes, bytes int }

// groupBoundsFor keeps a group commit within Badger's largest transaction
// for a memtable of memTable bytes (15% of it, and as many entries as
// skiplist nodes fit in that): groupWrites and groupBytes by default, less
// for a small memtable. A write is at most 5 entries (its outcome, its
// row, the job's move between indexes).
func groupBoundsFor(memTable int64) groupBounds {
	maxBatch := 15 * memTable / 100
	maxCount := maxBatch / int64(skl.MaxNodeSize)
	return groupBounds{
		writes: int(min(int64(groupWrites), max(1, maxCount/8))),
		bytes:  int(min(int64(groupBytes), max(1, maxBatch/2))),
	}
}
