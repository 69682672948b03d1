package servecmd

import (
	"errors"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/persistence"
)

// SIFTBATCH_TEST_STORE_SIZES: unset, the store's defaults; MEMTABLE,VLOG
// in bytes; anything else a usage error that names it.
func TestStoreSizes(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want persistence.Options
		bad  bool
	}{
		{"", persistence.Options{}, false},
		{"131072,1048576", persistence.Options{MemTableSize: 131072, ValueLogFileSize: 1048576}, false},
		{"0,1048576", persistence.Options{ValueLogFileSize: 1048576}, false},
		{"131072", persistence.Options{}, true},
		{"1,2,3", persistence.Options{}, true},
		{"-1,0", persistence.Options{}, true},
		{"128k,1m", persistence.Options{}, true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(storeSizesEnv, tc.env)
			got, err := storeSizes()
			var usage *cli.UsageError
			if tc.bad != errors.As(err, &usage) || (err != nil && !tc.bad) {
				t.Fatalf("%q: err %v, want a usage error: %v", tc.env, err, tc.bad)
			}
			if got != tc.want {
				t.Fatalf("%q: %+v, want %+v", tc.env, got, tc.want)
			}
		})
	}
}
