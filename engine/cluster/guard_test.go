package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clusterpb"
	"github.com/sift/batch/engine/cluster/clustertls"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/metrics"
)

// A node's peer counters feed the metrics' cluster collector.
var _ metrics.PeerCounters = (*cluster.Node)(nil)

// streamDeadline bounds a test's calls and streams to a node's cluster
// port: a deadline for one that hung, generous for a loaded machine under
// the race detector (the test's own waits fail sooner).
const streamDeadline = 2 * time.Minute

// startStranger starts a bare protoactor actor system with a remote, a
// member of no cluster: a stranger that reaches the cluster port and
// speaks protoactor's remote (opts: remoteTLS for one that holds a
// certificate). Stopped when the test ends.
func startStranger(t *testing.T, opts ...remote.ConfigOption) *actor.ActorSystem {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	r := remote.NewRemote(system, remote.Configure("127.0.0.1", 0, opts...))
	r.Start()
	t.Cleanup(func() {
		r.Shutdown(true)
		system.Shutdown()
	})
	return system
}

// dialNode dials n's cluster port with creds, a gRPC client of
// protoactor's remote; closed when the test ends.
func dialNode(t *testing.T, n *node, creds credentials.TransportCredentials) remote.RemotingClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+n.Node.Address(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return remote.NewRemotingClient(conn)
}

// strangerCreds are the credentials of a stranger: a certificate of the
// cluster's CA that names a node that is no member, or plaintext.
func strangerCreds(t *testing.T, plaintext bool) credentials.TransportCredentials {
	if plaintext {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(clustertest.NodeTLS(t, "mallory").Client())
}

// ask sends msg from system to pid and returns the answer.
func ask(t *testing.T, system *actor.ActorSystem, pid *actor.PID, msg any) any {
	t.Helper()
	res, err := system.Root.RequestFuture(pid, msg, 10*time.Second).Result()
	if err != nil {
		t.Fatalf("%T to %s: %v", msg, pid.Id, err)
	}
	return res
}

// TestGuard_PeerCallsCannotCrashNode: the calls of protoactor's remote that
// panic in protoactor (ListProcesses, GetProcessDiagnostics: "implement
// me") end that call with codes.Internal, counted; a batch whose envelopes
// index past its arrays is refused, its stream ended, before protoactor
// reads it; the node serves on. With TLS (a stranger holding a cluster
// certificate) and in plaintext.
func TestGuard_PeerCallsCannotCrashNode(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"tls", "insecure"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			plain := mode == "insecure"
			tc := clustertest.Start(t, clustertest.Options{Insecure: plain}, "a", "b")
			a, b := tc.Node("a"), tc.Node("b")
			id := a.Submit(t, "alice-key", "http://x/page")
			a.WaitDone(t, id)

			client := dialNode(t, a, strangerCreds(t, plain))
			ctx, cancel := context.WithTimeout(context.Background(), streamDeadline)
			defer cancel()
			if _, err := client.ListProcesses(ctx, &remote.ListProcessesRequest{}); status.Code(err) != codes.Internal {
				t.Errorf("ListProcesses: %v, want codes.Internal", err)
			}
			if _, err := client.GetProcessDiagnostics(ctx, &remote.GetProcessDiagnosticsRequest{}); status.Code(err) != codes.Internal {
				t.Errorf("GetProcessDiagnostics: %v, want codes.Internal", err)
			}
			if got := a.Node.PeerPanics(); got != 2 {
				t.Errorf("PeerPanics = %d, want 2", got)
			}

			target := []*actor.PID{actor.NewPID(a.Node.Address(), cluster.NodeActor)}
			hello := string(proto.MessageName(&clusterpb.Hello{}))
			for name, batch := range map[string]*remote.MessageBatch{
				"target 5 of one": {Targets: target, TypeNames: []string{hello}, Envelopes: []*remote.MessageEnvelope{{Target: 5}}},
				"negative target": {Targets: target, TypeNames: []string{hello}, Envelopes: []*remote.MessageEnvelope{{Target: -1}}},
				"no targets":      {TypeNames: []string{hello}, Envelopes: []*remote.MessageEnvelope{{}}},
				"sender past end": {Targets: target, TypeNames: []string{hello}, Envelopes: []*remote.MessageEnvelope{{Sender: 1}}},
				"type past end":   {Targets: target, TypeNames: []string{hello}, Envelopes: []*remote.MessageEnvelope{{TypeId: 1}}},
				"serializer 9":    {Targets: target, TypeNames: []string{hello}, Envelopes: []*remote.MessageEnvelope{{SerializerId: 9}}},
				"unknown type":    {Targets: target, TypeNames: []string{"no.Such"}, Envelopes: []*remote.MessageEnvelope{{}}},
				"second envelope bad": {Targets: target, TypeNames: []string{hello},
					Envelopes: []*remote.MessageEnvelope{{}, {Target: 1}}},
			} {
				refused := a.Node.PeerRefusals()
				stream, err := client.Receive(ctx)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: batch}}); err != nil {
					t.Fatalf("%s: send: %v", name, err)
				}
				if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
					t.Errorf("%s: the stream ended with %v, want codes.InvalidArgument", name, err)
				}
				if got := a.Node.PeerRefusals(); got != refused+1 {
					t.Errorf("%s: PeerRefusals = %d, want %d", name, got, refused+1)
				}
			}
			if got := a.Node.PeerPanics(); got != 2 {
				t.Errorf("PeerPanics after the batches = %d, want 2 (refused before protoactor read them)", got)
			}

			// a serves on: its job, through b; b's, through a.
			if code, _, body := b.Do(t, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
				t.Errorf("a's job through b after the attack: %d %s", code, body)
			}
			idB := b.Submit(t, "bob-key", "http://x/page")
			b.WaitDone(t, idB)
			if code, _, body := a.Do(t, "GET", "/v1/batch/"+idB, "bob-key", ""); code != http.StatusOK {
				t.Errorf("b's job through a after the attack: %d %s", code, body)
			}
		})
	}
}

// TestGuard_HandshakeRefusesStrangers: with TLS, a client without a
// certificate, with a certificate of another CA, or in plaintext is
// refused at the handshake: its call never reaches protoactor (which
// would panic on it, counted). A client with a certificate of the
// cluster's CA reaches it.
func TestGuard_HandshakeRefusesStrangers(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a")
	a := tc.Node("a")
	other, err := clustertls.Generate([]string{"mallory"}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := clustertls.New(other.CA.Cert, other.Nodes["mallory"].Cert, other.Nodes["mallory"].Key)
	if err != nil {
		t.Fatal(err)
	}
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} // trusts any server: only the server refuses
	otherClient := otherCA.Client()
	otherClient.VerifyPeerCertificate = nil // trusts any server: only the server refuses
	ctx, cancel := context.WithTimeout(context.Background(), streamDeadline)
	defer cancel()
	for name, creds := range map[string]credentials.TransportCredentials{
		"no certificate":           credentials.NewTLS(noCert),
		"another CA's certificate": credentials.NewTLS(otherClient),
		"plaintext":                insecure.NewCredentials(),
	} {
		_, err := dialNode(t, a, creds).ListProcesses(ctx, &remote.ListProcessesRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want codes.Unavailable (refused at the handshake)", name, err)
		}
	}
	if got := a.Node.PeerPanics(); got != 0 {
		t.Errorf("PeerPanics = %d: a refused client reached protoactor", got)
	}
	// The control: a certificate of the cluster's CA reaches protoactor.
	if _, err := dialNode(t, a, strangerCreds(t, false)).ListProcesses(ctx, &remote.ListProcessesRequest{}); status.Code(err) != codes.Internal {
		t.Errorf("a cluster certificate: %v, want codes.Internal (protoactor's panic)", err)
	}
	if got := a.Node.PeerPanics(); got != 1 {
		t.Errorf("PeerPanics = %d, want 1", got)
	}
}

// isRetryable reports whether res is the screen's retryable refusal.
func isRetryable(res any) bool {
	e, ok := res.(*pacluster.GrainErrorResponse)
	return ok && e.Reason == pacluster.ErrorReason_UNAVAILABLE
}

// TestGuard_NonMemberRefused: with TLS, a node that holds a certificate
// of the cluster's CA but is not a member (or claims a member's name from
// another address) gets nothing from the node's actor and the callers'
// grains, and changes nothing: it lists no caller's jobs, a fake settle
// frees no place under a caller's cap, fake admissions lock no caller
// out. Its messages are refused, counted, and not answered (it is at no
// member's address: an answer would have the node dial it), a Hello too
// (a joining node's Hello is answered once the node sees it among the
// members: TestGuard_UnknownMemberRetries).
func TestGuard_NonMemberRefused(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{Config: engine.Config{JobsPerCaller: 1}}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	held := a.Submit(t, "alice-key", "http://x/hold")
	if code, _ := b.Post("alice-key", "http://x/page"); code != http.StatusTooManyRequests {
		t.Fatalf("alice's second job, at her cap of 1: %d, want 429", code)
	}
	grain := cluster.GrainPID(a.Node, "alice")
	if grain == nil {
		t.Fatal("no grain for alice")
	}

	for _, who := range []string{"mallory", "b"} { // b: a member's name, from another address
		stranger := startStranger(t, clustertest.RemoteTLS(t, who)...)
		refused := a.Node.PeerRefusals() + b.Node.PeerRefusals()
		type sent struct {
			what   string
			answer *actor.Future
		}
		var all []sent
		send := func(to *actor.PID, msg any) {
			all = append(all, sent{fmt.Sprintf("%T to %s", msg, to.Id), stranger.Root.RequestFuture(to, msg, 2*time.Second)})
		}
		for _, n := range []*node{a, b} {
			to := actor.NewPID(n.Node.Address(), cluster.NodeActor)
			send(to, &clusterpb.Hello{})
			send(to, &clusterpb.ListRequest{Caller: "alice"})
			send(to, &clusterpb.CallerJobsRequest{Caller: "alice"})
			send(to, &clusterpb.ReusableRequest{Caller: "alice", Key: "k", Id: held})
			send(to, &clusterpb.Request{Method: "GET", Uri: "/v1/batch/" + held, Authorization: "Bearer alice-key", Session: 7})
			send(actor.NewPID(n.Node.Address(), disthash.PartitionActivatorActorName),
				&pacluster.ActivationRequest{ClusterIdentity: &pacluster.ClusterIdentity{Identity: "alice", Kind: "siftbatch-caller"}})
		}
		for i := range 4 {
			send(grain, &clusterpb.Settle{Caller: "alice", Id: held, Status: "done"})
			send(grain, &clusterpb.Admit{Caller: "alice", Key: fmt.Sprint("fake", i), Id: fmt.Sprintf("%032x", i), Cap: 1000})
			send(grain, &clusterpb.Remember{Caller: "alice", Key: "k", Id: held})
		}
		for _, s := range all {
			if res, err := s.answer.Result(); err == nil {
				t.Errorf("%s: %s answered %v", who, s.what, res)
			}
		}
		// A future's timeout says nothing of its message's delivery: on a
		// loaded machine the stranger's remote may still be connecting.
		// Each message is refused (counted) once it arrives.
		testkit.WaitFor(t, who+"'s messages all refused", func() bool {
			return a.Node.PeerRefusals()+b.Node.PeerRefusals() >= refused+int64(len(all))
		})
		if got := a.Node.PeerRefusals() + b.Node.PeerRefusals(); got != refused+int64(len(all)) {
			t.Errorf("%s: %d refusals, want %d", who, got-refused, len(all))
		}
	}

	// Nothing changed: alice is still at her cap; once her job ends, she
	// is not locked out.
	if code, _ := b.Post("alice-key", "http://x/page"); code != http.StatusTooManyRequests {
		t.Errorf("alice's second job after a stranger's settle: %d, want 429", code)
	}
	tc.Hold.Open()
	a.WaitDone(t, held)
	testkit.WaitFor(t, "alice may submit again", func() bool {
		code, _ := b.Post("alice-key", "http://x/page")
		return code == http.StatusAccepted
	})
}

// TestGuard_UnknownMemberRetries: a member that has not said who it is
// yet (this node's view of it differs for a moment) is answered a
// retryable error by the node's actor, at once; once it has said who it
// is, it is answered.
func TestGuard_UnknownMemberRetries(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a")
	a := tc.Node("a")
	hello := make(chan struct{})
	t.Cleanup(func() { closeOnce(hello) })
	slow := startSlowMember(t, tc, "slow", hello)
	testkit.WaitFor(t, "a sees slow among its members", func() bool { return len(a.Node.Members()) == 2 })
	to := actor.NewPID(a.Node.Address(), cluster.NodeActor)
	if res := ask(t, slow, to, &clusterpb.ListRequest{Caller: "alice"}); !isRetryable(res) {
		t.Errorf("a list request of a member not known yet: %v, want a retryable refusal", res)
	}
	close(hello)
	testkit.WaitFor(t, "a knows slow", func() bool { return slices.Contains(a.Node.Members(), "slow") })
	if res, ok := ask(t, slow, to, &clusterpb.ListRequest{Caller: "alice"}).(*clusterpb.ListReply); !ok || res.Error != "" {
		t.Errorf("a list request of slow, known: %v", res)
	}
}

// TestGuard_MemberCannotBeStopped: Stop, PoisonPill and Watch, sent to a
// node's actor or a caller's grain by a stranger or by a member, are
// refused: the node answers on, its jobs through the other node, its
// grains' admissions.
func TestGuard_MemberCannotBeStopped(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"tls", "insecure"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			plain := mode == "insecure"
			tc := clustertest.Start(t, clustertest.Options{Insecure: plain}, "a", "b")
			a, b := tc.Node("a"), tc.Node("b")
			grain := cluster.GrainPID(a.Node, "alice")
			if grain == nil {
				t.Fatal("no grain for alice")
			}
			// victim holds alice's grain; the member other attacks it.
			victim, other := a, b
			if grain.Address == b.Node.Address() {
				victim, other = b, a
			}
			id := victim.Submit(t, "alice-key", "http://x/page")
			victim.WaitDone(t, id)
			victimActor := actor.NewPID(victim.Node.Address(), cluster.NodeActor)

			var opts []remote.ConfigOption
			if !plain {
				opts = clustertest.RemoteTLS(t, "mallory")
			}
			for who, system := range map[string]*actor.ActorSystem{"a stranger": startStranger(t, opts...), "a member": cluster.SystemOf(other.Node)} {
				refused := victim.Node.PeerRefusals()
				// PIDs of their own: a PID caches the process it was
				// resolved to.
				for _, to := range []*actor.PID{actor.NewPID(victimActor.Address, victimActor.Id), actor.NewPID(grain.Address, grain.Id)} {
					system.Root.Stop(to) // a Stop system message
					system.Root.Send(to, &actor.Stop{})
					system.Root.Send(to, &actor.PoisonPill{})
					system.Root.Send(to, &actor.Watch{Watcher: actor.NewPID(victim.Node.Address(), "nobody")})
				}
				testkit.WaitFor(t, who+"'s messages refused", func() bool { return victim.Node.PeerRefusals() >= refused+8 })
			}

			// The victim answers on: its job through the other node;
			// alice's grain admits her jobs on either.
			if code, _, body := other.Do(t, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
				t.Errorf("the victim's job through the other node: %d %s", code, body)
			}
			for _, n := range []*node{victim, other} {
				n.WaitDone(t, n.Submit(t, "alice-key", "http://x/page?on="+n.Name)) // another body: a resubmit reuses the job
			}
			if got := cluster.GrainPID(other.Node, "alice"); !proto.Equal(got, grain) {
				t.Errorf("alice's grain is %v, was %v: it was stopped", got, grain)
			}
		})
	}
}

// memberIDOf asks n's remote who it is, as an outsider holding a
// certificate of the cluster's CA can: a ConnectRequest's answer names the
// node's member id.
func memberIDOf(t *testing.T, n *node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamDeadline)
	defer cancel()
	stream, err := dialNode(t, n, strangerCreds(t, false)).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "mallory", Address: "127.0.0.1:1"}}}}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetConnectResponse().GetMemberId()
	if id == "" {
		t.Fatalf("no member id in %v", res)
	}
	return id
}

// heartbeatOf returns the sequence number of n's own gossip heartbeat:
// it grows at each tick of n's gossip loop.
func heartbeatOf(n *node) int64 {
	system := cluster.SystemOf(n.Node)
	hb, err := pacluster.GetCluster(system).Gossip.GetState(pacluster.HeartbeatKey)
	if err != nil || hb[system.ID] == nil {
		return 0
	}
	return hb[system.ID].SequenceNumber
}

// dialWatch listens at loopback addresses a stranger names as its
// messages' senders, and counts the connections the node opens to them:
// a dial to an address of the stranger's choosing, seen as it happens
// (not a count of the process's gRPC goroutines, which other tests'
// connections to their stopped peers add to and take from).
type dialWatch struct {
	dials atomic.Int64
}

// addr returns the i-th address of w: a listener on its own loopback
// address, closed when the test ends.
func (w *dialWatch) addr(t *testing.T, i int) string {
	t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.%d.%d:0", 1+i/250, 2+i%250))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			w.dials.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String()
}

// TestGuard_StrangerCannotMakeNodeDial: a peer that is not a member cannot
// have the node open connections to addresses of its choosing: a message
// whose sender is at no member's address is refused and not answered
// (guard.go's screen), whatever its target, since protoactor's remote
// opens, for each address it sends to, an endpoint writer and a gRPC
// connection it retries for good (CLUSTER.md, protoactor bugs, 7). Three
// ways protoactor would answer, each from senders at addresses nothing
// listens on: Hello to siftbatch-node, a GossipRequest to protoactor's
// gossip actor, any message to an actor that does not exist (its dead
// letter is answered). With TLS (a certificate of the cluster's CA that
// names no member) and in plaintext. Loopback addresses only.
func TestGuard_StrangerCannotMakeNodeDial(t *testing.T) {
	testkit.Long(t)
	for _, mode := range []string{"tls", "insecure"} {
		t.Run(mode, func(t *testing.T) {
			plain := mode == "insecure"
			tc := clustertest.Start(t, clustertest.Options{Insecure: plain}, "a")
			a := tc.Node("a")
			strangerDials(t, a, strangerCreds(t, plain))
		})
	}
}

// strangerDials sends, as a client with creds, messages from senders at
// addresses of its own to n, in three ways protoactor would answer, and
// checks that each is refused and n dials none of them.
func strangerDials(t *testing.T, a *node, creds credentials.TransportCredentials) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamDeadline)
	defer cancel()
	stream, err := dialNode(t, a, creds).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello, err := proto.Marshal(&clusterpb.Hello{})
	if err != nil {
		t.Fatal(err)
	}
	gossip, err := proto.Marshal(&pacluster.GossipRequest{FromMemberId: "mallory", State: &pacluster.GossipState{}})
	if err != nil {
		t.Fatal(err)
	}
	const perWay = 4
	next := 0 // the next address
	var watch dialWatch
	for _, way := range []struct {
		name, target, typ string
		data              []byte
	}{
		{"Hello to siftbatch-node", cluster.NodeActor, string(proto.MessageName(&clusterpb.Hello{})), hello},
		{"GossipRequest to gossip", pacluster.DefaultGossipActorName, string(proto.MessageName(&pacluster.GossipRequest{})), gossip},
		{"Hello to an actor that does not exist", "nobody", string(proto.MessageName(&clusterpb.Hello{})), hello},
	} {
		dials, refused := watch.dials.Load(), a.Node.PeerRefusals()
		for range perWay {
			batch := &remote.MessageBatch{Targets: []*actor.PID{actor.NewPID(a.Node.Address(), way.target)}, TypeNames: []string{way.typ},
				Senders:   []*actor.PID{actor.NewPID(watch.addr(t, next), "future$1")},
				Envelopes: []*remote.MessageEnvelope{{Sender: 1, MessageData: way.data}}}
			next++
			if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: batch}}); err != nil {
				t.Fatalf("%s: send: %v", way.name, err)
			}
		}
		// Each is refused (counted), or answered: the node dials its sender.
		testkit.WaitFor(t, way.name+": each refused or answered", func() bool {
			return a.Node.PeerRefusals()-refused+watch.dials.Load()-dials >= perWay
		})
		if got := watch.dials.Load() - dials; got > 0 {
			t.Errorf("%s: the node dials %d of %d addresses a stranger chose", way.name, got, perWay)
		}
		if got := a.Node.PeerRefusals() - refused; got != perWay {
			t.Errorf("%s: %d refused, want %d", way.name, got, perWay)
		}
	}
}

// TestGuard_StrangerCannotAnswerAnothersRequests: with TLS, a peer that is
// not a member cannot have node a answer a pending request of member b (a
// reply inbox of b's, named as its message's sender): a refuses its
// message and answers nobody, so b's request reads what a sends it next.
func TestGuard_StrangerCannotAnswerAnothersRequests(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	testkit.WaitFor(t, "a knows b", func() bool { return slices.Contains(a.Node.Members(), "b") })
	pending := actor.NewFuture(cluster.SystemOf(b.Node), 20*time.Second) // a request of b's, pending
	ctx, cancel := context.WithTimeout(context.Background(), streamDeadline)
	defer cancel()
	stream, err := dialNode(t, a, strangerCreds(t, false)).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := proto.Marshal(&clusterpb.ListRequest{Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	refused := a.Node.PeerRefusals()
	batch := &remote.MessageBatch{Targets: []*actor.PID{actor.NewPID(a.Node.Address(), cluster.NodeActor)},
		TypeNames: []string{string(proto.MessageName(&clusterpb.ListRequest{}))},
		Senders:   []*actor.PID{pending.PID()},
		Envelopes: []*remote.MessageEnvelope{{Sender: 1, MessageData: list}}}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: batch}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "a refuses it", func() bool { return a.Node.PeerRefusals() > refused })
	// An answer of a's to b's request would have been queued before this
	// one, on the same connection: b's request reads the first.
	mark := &clusterpb.NodeInfo{Node: "a", Tag: cluster.Tag("a")}
	cluster.SystemOf(a.Node).Root.Send(pending.PID(), mark)
	if res, err := pending.Result(); err != nil || !proto.Equal(res.(proto.Message), mark) {
		t.Errorf("b's pending request read %v (%v), want a's mark: a answered it for a stranger", res, err)
	}
}

// automanaged returns the automanaged providers of count nodes on
// loopback, each polling all every 200 ms (the tests wait on members),
// each given its manage port's listener (no port is closed and bound
// again).
func automanaged(t *testing.T, count int) []cluster.Provider {
	t.Helper()
	var (
		peers []string
		ls    []net.Listener
	)
	for range count {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() }) // if no node took it over
		ls = append(ls, l)
		peers = append(peers, l.Addr().String())
	}
	out := make([]cluster.Provider, count)
	for i := range out {
		out[i] = cluster.AutomanagedOn(ls[i], peers, 200*time.Millisecond)
	}
	return out
}

// TestGuard_GossipCannotEvictMember: a holder of a certificate of the
// cluster's CA that is not a member (mallory) cannot take a member out of
// the membership (CLUSTER.md, Security: a non-member "may only ask who the
// nodes are"; it cannot "talk to siftbatch-node or the grains"). One
// GossipRequest to protoactor's gossip actor, claiming that member left
// (its member id, which any ConnectRequest's answer gives), is not
// believed: the node does not block that member, which keeps answering
// for its jobs through it. Under the automanaged provider serve runs by
// default.
func TestGuard_GossipCannotEvictMember(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	tc := clustertest.New(t, clustertest.Options{})
	ps := automanaged(t, 2)
	a, b := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: clustertest.NodeOptions{Provider: &ps[0]}},
		clustertest.Spec{Name: "b", NodeOptions: clustertest.NodeOptions{Provider: &ps[1]}})[0], tc.Node("b")
	tc.WaitMembers(2)
	id := b.Submit(t, "alice-key", "http://x/page")
	b.WaitDone(t, id)
	victim := memberIDOf(t, b)

	stranger := startStranger(t, clustertest.RemoteTLS(t, "mallory")...)
	left, err := anypb.New(&pacluster.MemberHeartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	forged := &pacluster.GossipRequest{FromMemberId: "mallory", State: &pacluster.GossipState{Members: map[string]*pacluster.GossipMemberState{
		victim: {Values: map[string]*pacluster.GossipKeyValue{pacluster.GracefullyLeftKey: {SequenceNumber: 1 << 40, Value: left}}},
	}}}
	// Sent without a sender (the gossip actor reads the state before it
	// answers): refused, or believed, which a's next tick acts on.
	refused := a.Node.PeerRefusals()
	blocks := remote.GetRemote(cluster.SystemOf(a.Node)).BlockList()
	stranger.Root.Send(actor.NewPID(a.Node.Address(), pacluster.DefaultGossipActorName), forged)
	testkit.WaitFor(t, "a refuses the gossip, or blocks b", func() bool { return a.Node.PeerRefusals() > refused || blocks.IsBlocked(victim) })
	// Two ticks of a's gossip loop later, a has acted on what it believed
	// (the loop blocks the members gossip says left, at each tick).
	hb := heartbeatOf(a)
	testkit.WaitFor(t, "two ticks of a's gossip loop", func() bool { return heartbeatOf(a) >= hb+2 })
	if !blocks.IsBlocked(victim) {
		if code, _, body := a.Do(t, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
			t.Errorf("b's job through a after the attack: %d %s", code, body)
		}
		t.Logf("refused %d", a.Node.PeerRefusals()-refused)
		return
	}
	t.Errorf("a blocks b's member id for good, on the word of a non-member")
	testkit.WaitFor(t, "a drops b from its members", func() bool { return !slices.Contains(a.Node.Members(), "b") })
	code, _, body := a.Do(t, "GET", "/v1/batch/"+id, "alice-key", "")
	t.Errorf("a's members are now %v (b's own view: %v, b a member of its own list: %v); b's job through a: %d %s",
		a.Node.Members(), b.Node.Members(), b.Node.Membership().Member, code, body)
}

// TestGuard_MemberGossipSpeaksForItself: a member's gossip carries
// "left" and a heartbeat only for that member: one that says another
// member left, or sets that member's heartbeat far ahead (its real ones
// would stop counting, and it would be blocked when the forged one
// expires), is not believed about the other member. Its own state is.
func TestGuard_MemberGossipSpeaksForItself(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	testkit.WaitFor(t, "a knows b and c", func() bool {
		m := a.Node.Members()
		return slices.Contains(m, "b") && slices.Contains(m, "c")
	})
	victim := cluster.SystemOf(c.Node).ID
	value, err := anypb.New(&pacluster.MemberHeartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	const far = 1 << 40
	forged := &pacluster.GossipRequest{FromMemberId: victim, State: &pacluster.GossipState{Members: map[string]*pacluster.GossipMemberState{
		victim: {Values: map[string]*pacluster.GossipKeyValue{
			pacluster.GracefullyLeftKey: {SequenceNumber: far, Value: value},
			pacluster.HeartbeatKey:      {SequenceNumber: far, Value: value},
		}},
	}}}
	// From b's own actor system: a sender at b's address, under b's
	// certificate.
	res, err := cluster.SystemOf(b.Node).Root.RequestFuture(actor.NewPID(a.Node.Address(), pacluster.DefaultGossipActorName), forged, 5*time.Second).Result()
	if _, ok := res.(*pacluster.GossipResponse); err != nil || !ok {
		t.Fatalf("b's gossip to a: %v, %v: want a GossipResponse (a member's gossip is read)", res, err)
	}
	hb := heartbeatOf(a)
	testkit.WaitFor(t, "two ticks of a's gossip loop", func() bool { return heartbeatOf(a) >= hb+2 })
	gossip := pacluster.GetCluster(cluster.SystemOf(a.Node)).Gossip
	if left, err := gossip.GetState(pacluster.GracefullyLeftKey); err != nil || left[victim] != nil {
		t.Errorf("a's gossip says c left (%v): b spoke for c", err)
	}
	if beats, err := gossip.GetState(pacluster.HeartbeatKey); err != nil || beats[victim] != nil && beats[victim].SequenceNumber >= far {
		t.Errorf("c's heartbeat in a's gossip is b's forged one (%v)", err)
	}
	if remote.GetRemote(cluster.SystemOf(a.Node)).BlockList().IsBlocked(victim) {
		t.Errorf("a blocks c on b's word")
	}
	if !slices.Contains(a.Node.Members(), "c") {
		t.Errorf("a's members %v: c is gone", a.Node.Members())
	}
}

// rawCert signs a certificate with tmpl's fields by parent (key
// parentKey) and returns it as a TLS certificate carrying chain after it.
func rawCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, chain ...[]byte) (tls.Certificate, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: append([][]byte{der}, chain...), PrivateKey: key}, cert, key
}

// nodeTemplate is a node certificate's template as cluster-certs makes
// it, for name, valid from notBefore to notAfter.
func nodeTemplate(name string, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name},
	}
}

// TestGuard_HandshakeRefusesBadCertificates: with TLS, a client whose
// certificate was signed by the cluster's CA but is expired or not yet
// valid, names no node (its common name not among its DNS names), or was
// signed by a node's key rather than the CA's (a node's key is no CA: a
// leaked node key cannot make other nodes) is refused at the handshake;
// its call never reaches protoactor (CLUSTER.md, Security: a peer is
// accepted "only if the peer's certificate chains to a CA of its
// --cluster-ca file and names a node").
func TestGuard_HandshakeRefusesBadCertificates(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a")
	a := tc.Node("a")
	ca, caKey, _ := clustertest.CA(t)
	now := time.Now()
	valid := func(name string) *x509.Certificate {
		return nodeTemplate(name, now.Add(-time.Hour), now.Add(time.Hour))
	}
	noNode := valid("b")
	noNode.DNSNames = []string{"localhost"}
	// mallory's own certificate, valid, and the key that goes with it.
	_, mallory, malloryKey := rawCert(t, valid("mallory"), ca, caKey)
	certs := map[string]tls.Certificate{}
	certs["expired"], _, _ = rawCert(t, nodeTemplate("b", now.Add(-48*time.Hour), now.Add(-24*time.Hour)), ca, caKey)
	certs["not yet valid"], _, _ = rawCert(t, nodeTemplate("b", now.Add(24*time.Hour), now.Add(48*time.Hour)), ca, caKey)
	certs["common name not a DNS name"], _, _ = rawCert(t, noNode, ca, caKey)
	certs["signed by a node's key"], _, _ = rawCert(t, valid("b"), mallory, malloryKey, mallory.Raw)
	certs["self-signed, naming a node"], _, _ = rawCert(t, valid("b"), nil, nil)
	refusedAtHandshake(t, a, certs)
}

// refusedAtHandshake checks that each of certs, presented by a client of
// n's cluster port, is refused at the handshake: its call never reaches
// protoactor.
func refusedAtHandshake(t *testing.T, a *node, certs map[string]tls.Certificate) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamDeadline)
	defer cancel()
	for name, cert := range certs {
		conf := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
			InsecureSkipVerify: true} // trusts any server: only the server refuses
		_, err := dialNode(t, a, credentials.NewTLS(conf)).ListProcesses(ctx, &remote.ListProcessesRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want codes.Unavailable (refused at the handshake)", name, err)
		}
	}
	if got := a.Node.PeerPanics(); got != 0 {
		t.Errorf("PeerPanics = %d: a refused client reached protoactor", got)
	}
}

// TestGuard_HandshakeRefusesServerOnlyCertificate: a certificate of the
// cluster's CA that allows server authentication only (what a CA shared
// with other services, cert-manager's say, issues a web server) is no
// client's: the node refuses it as a peer's at the handshake (clustertls's
// verify: "chains to the cluster's CA for client and server use").
func TestGuard_HandshakeRefusesServerOnlyCertificate(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a")
	a := tc.Node("a")
	ca, caKey, _ := clustertest.CA(t)
	now := time.Now()
	serverOnly := nodeTemplate("web", now.Add(-time.Hour), now.Add(time.Hour))
	serverOnly.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	cert, _, _ := rawCert(t, serverOnly, ca, caKey)
	refusedAtHandshake(t, a, map[string]tls.Certificate{"server authentication only": cert})
}

// TestGuard_StrangerHelloTellsNoTags: a holder of a cluster certificate
// that is no member may send a Hello (a joining node asks who its peers
// are), but what its Hello tells of is a member's word only: a sender-less
// Hello of a stranger, telling of 1,024 forged node tags, is refused (and
// counted), and a job id of a forged tag still answers 404, not 503 "node
// unavailable" (nor does it fill the bound on the tags told, which would
// keep a fresh node from learning the real tags of nodes that left).
func TestGuard_StrangerHelloTellsNoTags(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a := tc.Node("a")
	ghost := "deadbeef" + strings.Repeat("0", 24)
	if code, _, body := a.Do(t, "GET", "/v1/batch/"+ghost, "alice-key", ""); code != http.StatusNotFound {
		t.Fatalf("a job of no node before the Hello: %d %s, want 404", code, body)
	}
	known := []*clusterpb.NodeInfo{{Node: "ghost", Tag: []byte{0xde, 0xad, 0xbe, 0xef}}}
	for i := range 1023 {
		known = append(known, &clusterpb.NodeInfo{Node: "forged", Tag: []byte{0xee, 0xed, byte(i >> 8), byte(i)}})
	}
	stranger := startStranger(t, clustertest.RemoteTLS(t, "mallory")...)
	refused := a.Node.PeerRefusals()
	stranger.Root.Send(actor.NewPID(a.Node.Address(), cluster.NodeActor), &clusterpb.Hello{Known: known})
	var code int
	testkit.WaitFor(t, "the stranger's Hello refused, or its tags learnt", func() bool {
		code, _, _ = a.Do(t, "GET", "/v1/batch/"+ghost, "alice-key", "")
		return a.Node.PeerRefusals() > refused || code == http.StatusServiceUnavailable
	})
	if code != http.StatusNotFound {
		t.Errorf("a job of a tag a stranger told of: %d, want 404 (the stranger's Hello refused: %d refusals)", code, a.Node.PeerRefusals()-refused)
	}
}

// TestGuard_MalformedHelloCannotCrashNode: a Hello whose bytes are not a
// Hello (garbage under the protobuf serializer, and under the JSON one),
// sent by a stranger holding a cluster certificate, does not crash the
// node nor panic in protoactor; the node serves on.
func TestGuard_MalformedHelloCannotCrashNode(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	id := a.Submit(t, "alice-key", "http://x/page")
	a.WaitDone(t, id)
	client := dialNode(t, a, strangerCreds(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), streamDeadline)
	defer cancel()
	target := []*actor.PID{actor.NewPID(a.Node.Address(), cluster.NodeActor)}
	hello := string(proto.MessageName(&clusterpb.Hello{}))
	panics := a.Node.PeerPanics()
	garbage := [][]byte{{0xff, 0xff, 0xff, 0xff, 0x0f}, {0x0a, 0xff, 0xff, 0xff, 0xff, 0x7f}, []byte("{not json"), make([]byte, 1<<20)}
	for i, data := range garbage {
		for _, ser := range []int32{0, 1} {
			stream, err := client.Receive(ctx)
			if err != nil {
				t.Fatalf("garbage %d, serializer %d: %v", i, ser, err)
			}
			batch := &remote.MessageBatch{Targets: target, TypeNames: []string{hello},
				Envelopes: []*remote.MessageEnvelope{{MessageData: data, SerializerId: ser}}}
			if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: batch}}); err != nil {
				t.Fatalf("garbage %d, serializer %d: send: %v", i, ser, err)
			}
			_ = stream.CloseSend()
			_, _ = stream.Recv()
		}
	}
	if got := a.Node.PeerPanics(); got != panics {
		t.Errorf("PeerPanics = %d after malformed Hellos, want %d", got, panics)
	}
	if code, _, body := b.Do(t, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
		t.Errorf("a's job through b after the malformed Hellos: %d %s", code, body)
	}
	idB := b.Submit(t, "bob-key", "http://x/page")
	b.WaitDone(t, idB)
	if code, _, body := a.Do(t, "GET", "/v1/batch/"+idB, "bob-key", ""); code != http.StatusOK {
		t.Errorf("b's job through a after the malformed Hellos: %d %s", code, body)
	}
}
