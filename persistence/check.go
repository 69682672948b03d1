package persistence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// checkTables opens every table the MANIFEST lists and verifies its
// checksums, before Badger opens the directory. Badger opens its tables on
// goroutines of its own, where a damaged table is a panic that no recover
// can reach: the process would die. Here the same panic is recovered and the
// store is refused with [ErrCorrupt]. Tables are immutable once listed, so
// this is safe while another process holds the store; a table that is gone
// (compacted away meanwhile) is left for Badger to judge.
func checkTables(dir string) error {
	f, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a new store
	}
	if err != nil {
		return fmt.Errorf("open store %s: %w", dir, err)
	}
	defer f.Close()
	m, _, err := replayManifest(f, dir)
	if err != nil {
		return fmt.Errorf("open store %s: %w: %s", dir, errManifestUnreadable, firstLine(err.Error()))
	}
	for id, tm := range m.Tables {
		if tm.KeyID != 0 {
			continue // encrypted: siftbatch never writes these
		}
		if err := checkTable(table.NewFilename(id, dir), tm.Compression); err != nil {
			return fmt.Errorf("open store %s: %w: table %d: %s", dir, ErrCorrupt, id, firstLine(err.Error()))
		}
	}
	return nil
}

// errManifestUnreadable is a MANIFEST Badger's Open would refuse:
// [repairManifestHole] may list its tables again.
var errManifestUnreadable = fmt.Errorf("%w: manifest", ErrCorrupt)

func replayManifest(f *os.File, dir string) (m badger.Manifest, off int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("unreadable")
		}
	}()
	return badger.ReplayManifestFile(f, 0, badger.DefaultOptions(dir).WithLogger(nil))
}

func checkTable(name string, c options.CompressionType) (err error) {
	mf, err := z.OpenMmapFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errors.New("unreadable")
	}
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("damaged")
		}
		_ = mf.Close(-1)
	}()
	// OpenTable reads the index (with NoVerification it never closes mf:
	// mf is closed once, here); VerifyChecksum reads every block.
	t, err := table.OpenTable(mf, table.Options{ChkMode: options.NoVerification, Compression: c})
	if err != nil {
		return errors.New("damaged")
	}
	if err := t.VerifyChecksum(); err != nil {
		return errors.New("damaged")
	}
	return nil
}
