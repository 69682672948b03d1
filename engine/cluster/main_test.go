package cluster_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine/enginetest/protoactortest"
)

// TestMain checks that no test leaves a goroutine behind: every node,
// runner, store and server a test starts is stopped by its end; but the
// goroutines protoactor-go leaves (docs/CLUSTER.md, "protoactor bugs"):
// its throttles' timers ([protoactortest.Leaks]), the test provider's TTL
// loop, which never ends, and gRPC's retries to a peer that has gone.
// Under the race detector, protoactor's own data races are suppressed
// (testdata/race.supp): two of them in its remote would fail every test
// with more than one node.
func TestMain(m *testing.M) {
	protoactortest.Main(m, "testdata/race.supp",
		// The test provider's TTL loop ranges over a ticker it stops, but a
		// stopped ticker's channel is never closed.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster/clusterproviders/test.(*Provider).startTtlReport.func1"),
		// gRPC client connections protoactor's remote dials to a peer and
		// never closes once the peer has gone: gRPC retries them for good
		// (docs/CLUSTER.md, "protoactor bugs", 7).
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransport"),
		// The stream protoactor's endpoint writer opens on such a
		// connection, with context.Background(): its watcher lives until
		// the connection closes (seen once in a CI run after a test's node
		// stopped while a peer's writer was connecting to it).
		goleak.IgnoreTopFunction("google.golang.org/grpc.newClientStreamWithParams.func4"),
	)
}
