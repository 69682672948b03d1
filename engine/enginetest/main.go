package enginetest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine/enginetest/protoactortest"
)

// Main is a package's TestMain: it runs the tests, then fails if any
// goroutine is left behind (goleak), but those opts ignore. It does not
// return.
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, opts...)
}

// ClusterMain is the TestMain of a package whose tests run protoactor-go's
// cluster: [Main] with the goroutines protoactor leaves ignored, and, under
// the race detector, the tests run again in a process of their own with
// GORACE's suppressions of protoactor's own data races read from the file
// supp (a path relative to the package's directory, such as
// engine/cluster's testdata/race.supp). See [protoactortest.Main]. It does
// not return.
func ClusterMain(m *testing.M, supp string, opts ...goleak.Option) {
	protoactortest.Main(m, supp, opts...)
}
