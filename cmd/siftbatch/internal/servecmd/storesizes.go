package servecmd

import (
	"os"
	"strconv"
	"strings"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/persistence"
)

// storeSizesEnv, when set, is "MEMTABLE,VLOG": the sizes in bytes at which
// serve's store starts a new memtable and a new value-log file
// (persistence.Options; 0 keeps a default). It is for tests, not a knob:
// the power-cut rounds (cmd/siftbatch/internal/powercuttest) set it so
// that Badger's files rotate within seconds of load. A store must be
// opened with the sizes it was written with, or larger.
const storeSizesEnv = "SIFTBATCH_TEST_STORE_SIZES"

// storeSizes reads storeSizesEnv; unset, the store's defaults.
func storeSizes() (persistence.Options, error) {
	v, ok := os.LookupEnv(storeSizesEnv)
	if !ok || v == "" {
		return persistence.Options{}, nil
	}
	mem, vlog, ok := strings.Cut(v, ",")
	m, err1 := strconv.ParseInt(mem, 10, 64)
	l, err2 := strconv.ParseInt(vlog, 10, 64)
	if !ok || err1 != nil || err2 != nil || m < 0 || l < 0 {
		return persistence.Options{}, cli.Usagef("%s=%q: want MEMTABLE,VLOG in bytes", storeSizesEnv, v)
	}
	return persistence.Options{MemTableSize: m, ValueLogFileSize: l}, nil // OpenWith checks their ranges
}
