package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
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

	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clusterpb"
	"github.com/sift/batch/engine/cluster/clustertls"
	"github.com/sift/batch/engine/metrics"
)

// A node's peer counters feed the metrics' cluster collector.
var _ metrics.PeerCounters = (*cluster.Node)(nil)

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
	conn, err := grpc.Dial(n.node.Address(), grpc.WithTransportCredentials(creds))
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
	return credentials.NewTLS(nodeTLS(t, "mallory").Client())
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

// TestNode_PeerCallsCannotCrashIt: the calls of protoactor's remote that
// panic in protoactor (ListProcesses, GetProcessDiagnostics: "implement
// me") end that call with codes.Internal, counted; a batch whose envelopes
// index past its arrays is refused, its stream ended, before protoactor
// reads it; the node serves on. With TLS (a stranger holding a cluster
// certificate) and in plaintext.
func TestNode_PeerCallsCannotCrashIt(t *testing.T) {
	for _, mode := range []string{"tls", "insecure"} {
		t.Run(mode, func(t *testing.T) {
			tc := newTestCluster(t)
			plain := mode == "insecure"
			a := tc.addWith("a", nodeOptions{insecure: plain})
			b := tc.addWith("b", nodeOptions{insecure: plain})
			tc.waitMembers(2)
			id := submit(t, a, "alice-key", "http://x/page")
			waitDone(t, a, id)

			client := dialNode(t, a, strangerCreds(t, plain))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := client.ListProcesses(ctx, &remote.ListProcessesRequest{}); status.Code(err) != codes.Internal {
				t.Errorf("ListProcesses: %v, want codes.Internal", err)
			}
			if _, err := client.GetProcessDiagnostics(ctx, &remote.GetProcessDiagnosticsRequest{}); status.Code(err) != codes.Internal {
				t.Errorf("GetProcessDiagnostics: %v, want codes.Internal", err)
			}
			if got := a.node.PeerPanics(); got != 2 {
				t.Errorf("PeerPanics = %d, want 2", got)
			}

			target := []*actor.PID{actor.NewPID(a.node.Address(), cluster.NodeActor)}
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
				refused := a.node.PeerRefusals()
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
				if got := a.node.PeerRefusals(); got != refused+1 {
					t.Errorf("%s: PeerRefusals = %d, want %d", name, got, refused+1)
				}
			}
			if got := a.node.PeerPanics(); got != 2 {
				t.Errorf("PeerPanics after the batches = %d, want 2 (refused before protoactor read them)", got)
			}

			// a serves on: its job, through b; b's, through a.
			if code, _, body := do(t, b, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
				t.Errorf("a's job through b after the attack: %d %s", code, body)
			}
			idB := submit(t, b, "bob-key", "http://x/page")
			waitDone(t, b, idB)
			if code, _, body := do(t, a, "GET", "/v1/batch/"+idB, "bob-key", ""); code != http.StatusOK {
				t.Errorf("b's job through a after the attack: %d %s", code, body)
			}
		})
	}
}

// TestNode_HandshakeRefusesStrangers: with TLS, a client without a
// certificate, with a certificate of another CA, or in plaintext is
// refused at the handshake: its call never reaches protoactor (which
// would panic on it, counted). A client with a certificate of the
// cluster's CA reaches it.
func TestNode_HandshakeRefusesStrangers(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.add("a")
	tc.waitMembers(1)
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
	if got := a.node.PeerPanics(); got != 0 {
		t.Errorf("PeerPanics = %d: a refused client reached protoactor", got)
	}
	// The control: a certificate of the cluster's CA reaches protoactor.
	if _, err := dialNode(t, a, strangerCreds(t, false)).ListProcesses(ctx, &remote.ListProcessesRequest{}); status.Code(err) != codes.Internal {
		t.Errorf("a cluster certificate: %v, want codes.Internal (protoactor's panic)", err)
	}
	if got := a.node.PeerPanics(); got != 1 {
		t.Errorf("PeerPanics = %d, want 1", got)
	}
}

// isRetryable reports whether res is the screen's retryable refusal.
func isRetryable(res any) bool {
	e, ok := res.(*pacluster.GrainErrorResponse)
	return ok && e.Reason == pacluster.ErrorReason_UNAVAILABLE
}

// TestCluster_NonMemberRefused: with TLS, a node that holds a certificate
// of the cluster's CA but is not a member (or claims a member's name from
// another address) gets nothing from the node's actor and the callers'
// grains, and changes nothing: it lists no caller's jobs, a fake settle
// frees no place under a caller's cap, fake admissions lock no caller
// out. Its messages are refused, counted, and not answered (it is at no
// member's address: an answer would have the node dial it). A Hello is
// answered (a joining node asks it).
func TestCluster_NonMemberRefused(t *testing.T) {
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller = 1
	a := tc.add("a")
	b := tc.add("b")
	tc.waitMembers(2)
	held := submit(t, a, "alice-key", "http://x/hold")
	if code, _ := post(t, b, "alice-key", "http://x/page"); code != http.StatusTooManyRequests {
		t.Fatalf("alice's second job, at her cap of 1: %d, want 429", code)
	}
	grain := cluster.GrainPID(a.node, "alice")
	if grain == nil {
		t.Fatal("no grain for alice")
	}

	for _, who := range []string{"mallory", "b"} { // b: a member's name, from another address
		stranger := startStranger(t, remoteTLS(t, who)...)
		refused := a.node.PeerRefusals() + b.node.PeerRefusals()
		type sent struct {
			what   string
			answer *actor.Future
		}
		var all []sent
		send := func(to *actor.PID, msg any) {
			all = append(all, sent{fmt.Sprintf("%T to %s", msg, to.Id), stranger.Root.RequestFuture(to, msg, 2*time.Second)})
		}
		for _, n := range []*node{a, b} {
			to := actor.NewPID(n.node.Address(), cluster.NodeActor)
			if res := ask(t, stranger, to, &clusterpb.Hello{}); fmt.Sprint(res) != fmt.Sprint(&clusterpb.NodeInfo{Node: n.name, Tag: cluster.Tag(n.name)}) {
				t.Errorf("%s: Hello to %s: %v", who, n.name, res)
			}
			send(to, &clusterpb.ListRequest{Caller: "alice"})
			send(to, &clusterpb.CallerJobsRequest{Caller: "alice"})
			send(to, &clusterpb.ReusableRequest{Caller: "alice", Key: "k", Id: held})
			send(to, &clusterpb.Request{Method: "GET", Uri: "/v1/batch/" + held, Authorization: "Bearer alice-key", Session: 7})
			send(actor.NewPID(n.node.Address(), disthash.PartitionActivatorActorName),
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
		if got := a.node.PeerRefusals() + b.node.PeerRefusals(); got != refused+int64(len(all)) {
			t.Errorf("%s: %d refusals, want %d", who, got-refused, len(all))
		}
	}

	// Nothing changed: alice is still at her cap; once her job ends, she
	// is not locked out.
	if code, _ := post(t, b, "alice-key", "http://x/page"); code != http.StatusTooManyRequests {
		t.Errorf("alice's second job after a stranger's settle: %d, want 429", code)
	}
	close(tc.release)
	waitDone(t, a, held)
	waitUntil(t, "alice may submit again", func() bool {
		code, _ := post(t, b, "alice-key", "http://x/page")
		return code == http.StatusAccepted
	})
}

// TestCluster_UnknownMemberRetries: a member that has not said who it is
// yet (this node's view of it differs for a moment) is answered a
// retryable error by the node's actor, at once; once it has said who it
// is, it is answered.
func TestCluster_UnknownMemberRetries(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.add("a")
	tc.waitMembers(1)
	hello := make(chan struct{})
	t.Cleanup(func() { closeOnce(hello) })
	slow := startSlowMember(t, tc, "slow", hello)
	waitUntil(t, "a sees slow among its members", func() bool { return len(a.node.Members()) == 2 })
	to := actor.NewPID(a.node.Address(), cluster.NodeActor)
	if res := ask(t, slow, to, &clusterpb.ListRequest{Caller: "alice"}); !isRetryable(res) {
		t.Errorf("a list request of a member not known yet: %v, want a retryable refusal", res)
	}
	close(hello)
	waitUntil(t, "a knows slow", func() bool { return slices.Contains(a.node.Members(), "slow") })
	if res, ok := ask(t, slow, to, &clusterpb.ListRequest{Caller: "alice"}).(*clusterpb.ListReply); !ok || res.Error != "" {
		t.Errorf("a list request of slow, known: %v", res)
	}
}

// TestCluster_MemberCannotBeStopped: Stop, PoisonPill and Watch, sent to a
// node's actor or a caller's grain by a stranger or by a member, are
// refused: the node answers on, its jobs through the other node, its
// grains' admissions.
func TestCluster_MemberCannotBeStopped(t *testing.T) {
	for _, mode := range []string{"tls", "insecure"} {
		t.Run(mode, func(t *testing.T) {
			tc := newTestCluster(t)
			plain := mode == "insecure"
			a := tc.addWith("a", nodeOptions{insecure: plain})
			b := tc.addWith("b", nodeOptions{insecure: plain})
			tc.waitMembers(2)
			grain := cluster.GrainPID(a.node, "alice")
			if grain == nil {
				t.Fatal("no grain for alice")
			}
			// victim holds alice's grain; the member other attacks it.
			victim, other := a, b
			if grain.Address == b.node.Address() {
				victim, other = b, a
			}
			id := submit(t, victim, "alice-key", "http://x/page")
			waitDone(t, victim, id)
			victimActor := actor.NewPID(victim.node.Address(), cluster.NodeActor)

			var opts []remote.ConfigOption
			if !plain {
				opts = remoteTLS(t, "mallory")
			}
			for who, system := range map[string]*actor.ActorSystem{"a stranger": startStranger(t, opts...), "a member": cluster.SystemOf(other.node)} {
				refused := victim.node.PeerRefusals()
				// PIDs of their own: a PID caches the process it was
				// resolved to.
				for _, to := range []*actor.PID{actor.NewPID(victimActor.Address, victimActor.Id), actor.NewPID(grain.Address, grain.Id)} {
					system.Root.Stop(to) // a Stop system message
					system.Root.Send(to, &actor.Stop{})
					system.Root.Send(to, &actor.PoisonPill{})
					system.Root.Send(to, &actor.Watch{Watcher: actor.NewPID(victim.node.Address(), "nobody")})
				}
				waitUntil(t, who+"'s messages refused", func() bool { return victim.node.PeerRefusals() >= refused+8 })
			}

			// The victim answers on: its job through the other node;
			// alice's grain admits her jobs on either.
			if code, _, body := do(t, other, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
				t.Errorf("the victim's job through the other node: %d %s", code, body)
			}
			for _, n := range []*node{victim, other} {
				waitDone(t, n, submit(t, n, "alice-key", "http://x/page?on="+n.name)) // another body: a resubmit reuses the job
			}
			if got := cluster.GrainPID(other.node, "alice"); !proto.Equal(got, grain) {
				t.Errorf("alice's grain is %v, was %v: it was stopped", got, grain)
			}
		})
	}
}
