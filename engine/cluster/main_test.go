package cluster_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine/enginetest"
)

// parallel is how many of the package's parallel tests run at once unless
// -test.parallel says otherwise: more than the cores, since a test spends
// most of its time in protoactor's fixed pauses (a second to join, two to
// leave), not on a CPU.
const parallel = 6

// TestMain checks that no test leaves a goroutine behind: every node,
// runner, store and server a test starts is stopped by its end; but the
// goroutines protoactor-go leaves (docs/CLUSTER.md, "protoactor bugs"):
// its throttles' timers, the test provider's TTL loop, which never ends,
// and gRPC's retries to a peer that has gone. Under the race detector,
// protoactor's own data races are suppressed (testdata/race.supp): two of
// them in its remote would fail every test with more than one node.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", fmt.Sprint(parallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	enginetest.ClusterMain(m, "testdata/race.supp",
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
		// protoactor's endpoint writer to a peer that stopped as it was
		// connecting sleeps between its attempts to connect again, and
		// ends after the last (nodes of a cluster stop at once).
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/remote.(*endpointWriter).initialize"),
		// A grain request to a member that hangs, which Close does not wait
		// for: it ends by itself, at protoactor's fixed 5 s placement
		// timeout (disthash) and the request's own timeout.
		goleak.IgnoreAnyFunction("github.com/sift/batch/engine/cluster.(*admitter).grainRequestFor.func1"),
		// The throttle of that request's log line "Request retried but
		// failed": its timer goroutine ends after its period
		// (docs/CLUSTER.md, "protoactor bugs", 3).
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*DefaultContext).Request.(*Config).ToClusterContextConfig.NewThrottleWithLogger.func3.1"),
		// protoactor's graceful stop of a remote, left to end by itself
		// once the remote was stopped hard (cluster.shutdown): its endpoint
		// manager waits for a writer's attempts to connect to a peer that
		// hangs or died.
		goleak.IgnoreAnyFunction("github.com/sift/batch/engine/cluster.stopGracefully"),
		// The automanaged provider's poll loop, which looks whether it is
		// shut down only between two polls: it ends within a poll (its
		// HTTP timeout, 2 s) and a refresh after the node closed (Close no
		// longer pauses 2 s as protoactor's own stop did).
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged.(*AutoManagedProvider).monitorMemberStatusChanges.func1"),
		// protoactor's gossip loop, caught in a request to its gossip actor
		// as the node stopped: it ends at the cluster's request timeout
		// (Config.TimeoutTime), after goleak's last look (seen once in
		// engine/dashboard under -race).
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).gossipLoop"),
	)
}
