package cluster

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sift/batch/engine/cluster/clusterpb"
	"github.com/sift/batch/engine/cluster/clustertls"
)

// guard is a node's guard component: the gRPC server's interceptors,
// which contain a peer's panics and screen each batch of messages a peer
// sends before protoactor reads it, and the TLS handshakes of the node's
// dials, which record the node found at each address dialled. Its state is
// counters and that record, all read and written without a lock: the
// guards run on the gRPC server's goroutines while Start holds the
// lifecycle's lock.
type guard struct {
	tls     *clustertls.Config // nil: Insecure
	node    string             // this node's name
	log     *slog.Logger
	life    *lifecycle
	members *memberList

	peerPanics    atomic.Int64 // calls of peers that panicked (Node.PeerPanics)
	peerRefusals  atomic.Int64 // messages of peers refused (Node.PeerRefusals)
	panicLogged   atomic.Int64 // when a peer's panic was last logged (UnixNano)
	refusalLogged atomic.Int64 // when a refusal was last logged (UnixNano)
	// dialled is, by address dialled (HOST:PORT), the node whose
	// certificate answered there at the last TLS handshake (string →
	// string): who may answer a Hello sent there.
	dialled sync.Map
}

// transport returns the options of protoactor's remote that make its gRPC
// server and its dials this node's: the cluster's mutual TLS, unless
// Insecure (protoactor's default dial option is plaintext, replaced here,
// not added to), and the guards of the server, whatever the mode.
func (g *guard) transport() []remote.ConfigOption {
	server := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.unaryGuard),
		grpc.ChainStreamInterceptor(g.streamGuard),
	}
	if g.tls == nil {
		return []remote.ConfigOption{remote.WithServerOptions(server...)}
	}
	server = append(server, grpc.Creds(credentials.NewTLS(g.tls.Server())))
	return []remote.ConfigOption{
		remote.WithServerOptions(server...),
		remote.WithDialOptions(grpc.WithTransportCredentials(&dialCreds{TransportCredentials: credentials.NewTLS(g.tls.Client()), g: g})),
	}
}

// dialCreds are the TLS credentials of the node's dials: each handshake's
// server certificate, verified, tells which node answers at the address
// dialled (guard.dialled).
type dialCreds struct {
	credentials.TransportCredentials
	g *guard
}

// ClientHandshake is the TLS handshake, that records which node the
// server at authority (the address dialled, HOST:PORT) is.
func (c *dialCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err == nil {
		if tlsInfo, ok := info.(credentials.TLSInfo); ok {
			if name, ok := c.g.tls.PeerNode(tlsInfo.State); ok {
				c.g.dialled.Store(authority, name)
			}
		}
	}
	return out, info, err
}

func (c *dialCreds) Clone() credentials.TransportCredentials {
	return &dialCreds{TransportCredentials: c.TransportCredentials.Clone(), g: c.g}
}

// dialledAs reports whether this node has dialled a current member of t
// and found node name answering there.
func (g *guard) dialledAs(t *topology, name string) bool {
	if t == nil {
		return false
	}
	for _, m := range t.members {
		if v, ok := g.dialled.Load(m.Address()); ok && v.(string) == name {
			return true
		}
	}
	return false
}

// unaryGuard is the gRPC server's unary interceptor: a panic ends the call
// with codes.Internal.
func (g *guard) unaryGuard(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer g.recoverPeer(&err)
	return handler(ctx, req)
}

// streamGuard is the gRPC server's stream interceptor: a panic ends the
// stream with codes.Internal, and each batch of messages a peer sends on
// protoactor's stream is screened before protoactor reads it
// ([guard.screen]). With TLS, the peer is the node its client certificate
// names, whatever the messages claim.
func (g *guard) streamGuard(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer g.recoverPeer(&err)
	gs := &guardedStream{ServerStream: ss, g: g}
	if g.tls != nil {
		p, ok := peer.FromContext(ss.Context())
		if !ok {
			return status.Error(codes.Unauthenticated, "no peer")
		}
		tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			return status.Error(codes.Unauthenticated, "no TLS")
		}
		if gs.peer, ok = g.tls.PeerNode(tlsInfo.State); !ok {
			return status.Error(codes.Unauthenticated, "no node certificate")
		}
	}
	return handler(srv, gs)
}

// recoverPeer, deferred, turns a panic of a peer's call into err
// (codes.Internal), counted and logged without its value (it may carry
// what the peer sent).
func (g *guard) recoverPeer(err *error) {
	if v := recover(); v != nil {
		count := g.peerPanics.Add(1)
		if logNow(&g.panicLogged) {
			g.log.Warn("cluster peer call panicked: ended", slog.String(logKeyNode, g.node), slog.Int64(logKeyCount, count))
		}
		*err = status.Error(codes.Internal, "internal error")
	}
}

// logNow reports whether a line of a kind last logged at *last may be
// logged now: at most one a second, so that a peer cannot flood the log.
func logNow(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(time.Second) && last.CompareAndSwap(prev, now)
}

// The log keys of a refusal's line: why (one of the reasons below), and
// the peer's node, as its verified certificate names it.
const (
	logKeyReason = "reason"
	logKeyPeer   = "peer"
)

// Why a peer's message is refused.
const (
	reasonMalformed   = "malformed batch"
	reasonSystem      = "system message from a peer"
	reasonNotMember   = "not a member"
	reasonSenderNotMe = "sender not the peer"
	reasonOtherNode   = "names another node"
	reasonOwnAddress  = "sender at this node's address"
	// reasonSenderElsewhere: the sender is at no current member's address.
	reasonSenderElsewhere = "sender not at a member's address"
	// reasonNotAnswer: a NodeInfo (a Hello's answer) to another actor
	// than a reply inbox.
	reasonNotAnswer = "not an answer"
	// reasonNoSender: a Hello without a sender (a member's Hello is a
	// request, answered to its sender).
	reasonNoSender = "hello without a sender"
)

const (
	// retryableRefusal is the message of the retryable error a refused
	// member is answered.
	retryableRefusal = "the sending node is not a member of the cluster as this node sees it now; try again in a while"
	// grainActorPrefix begins the ids of the callers' grains: children of
	// disthash's activator.
	grainActorPrefix = disthash.PartitionActivatorActorName + "/"
	// futurePrefix begins the ids of protoactor's reply inboxes (its
	// futures': "future$" and a number).
	futurePrefix = "future$"
	// serializers is how many serializers protoactor's remote registers:
	// protobuf (0) and JSON (1).
	serializers = 2
)

// Type names of the messages the screen knows, as protoactor's remote
// names them on the wire.
var (
	typeHello    = typeName(&clusterpb.Hello{})
	typeNodeInfo = typeName(&clusterpb.NodeInfo{})
	// protoactor's gossip: a member's state, and the answer.
	typeGossipRequest  = typeName(&pacluster.GossipRequest{})
	typeGossipResponse = typeName(&pacluster.GossipResponse{})
	// The messages that stop or watch an actor: no peer may send one to
	// any of this node's actors (this node's actors are never watched
	// from another node, nor stopped by one).
	systemTypes = map[string]bool{
		typeName(&actor.Stop{}):       true,
		typeName(&actor.PoisonPill{}): true,
		typeName(&actor.Watch{}):      true,
		typeName(&actor.Unwatch{}):    true,
		typeName(&actor.Terminated{}): true,
	}
)

func typeName(m proto.Message) string { return string(m.ProtoReflect().Descriptor().FullName()) }

// knownType reports whether protobuf knows the message type name:
// protoactor's deserializer panics on one it does not (docs/CLUSTER.md).
func knownType(name string) bool {
	_, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	return err == nil
}

// guardedStream is a peer's stream of protoactor's remote, each batch it
// receives screened.
type guardedStream struct {
	grpc.ServerStream
	g    *guard
	peer string // the node the peer's certificate names; "" without TLS
}

// RecvMsg receives the peer's next message, its batch screened: an error
// (the stream ends) for a malformed one; envelopes refused are taken out.
func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if rm, ok := m.(*remote.RemoteMessage); ok {
		if batch := rm.GetMessageBatch(); batch != nil {
			return s.g.screen(s.peer, batch)
		}
	}
	return nil
}

// errMalformed ends the stream of a peer that sent a malformed batch.
var errMalformed = status.Error(codes.InvalidArgument, "malformed message batch")

// screen checks a batch a peer sent before protoactor delivers it, and
// takes out the envelopes refused:
//
//   - a malformed batch (an envelope's target, sender, type or serializer
//     out of range: protoactor would index past its arrays; a type
//     protobuf does not know: its deserializer would panic) is refused
//     whole, and its stream ended;
//   - a message that stops or watches an actor (Stop, PoisonPill, Watch,
//     Unwatch, Terminated) is refused, whoever sends it, to any actor;
//   - a message whose sender is at this node's address is refused: a
//     peer's messages come from its own actors;
//   - a message whose sender is not at a current member's address is
//     refused, whatever its target, and not answered: protoactor answers
//     a message's sender (a Hello's NodeInfo, a gossip request's response,
//     a dead letter's response to a message for no actor), and its remote
//     opens a connection and a queue to each address it sends to, and
//     dials it for good (docs/CLUSTER.md, protoactor bugs, 7). A message
//     without a sender is answered to nobody;
//   - with TLS, peer is the node the stream's certificate names, and the
//     sender's address must be that node's (the address of a current
//     member that said it is peer), or the address of a member that has
//     not said who it is yet (a joining node's Hello; views of the
//     membership differ for a moment). A peer that is not a current member
//     (a member that said who it is with that name, as this node sees the
//     members now) may send only a Hello to the node's actor (a joining
//     node asks who its peers are before they know it; its sender at
//     the address of a member that has not said who it is, or has, as
//     peer: a Hello without a sender is refused, whoever sends it, for
//     the tags it tells of are a member's word only) and a NodeInfo (a
//     Hello's answer, from a node this node dialled at a member's address
//     and found peer's certificate at) to a reply inbox; every other message is refused, to
//     any actor: the node's, the grains', protoactor's gossip and
//     activator, reply inboxes. One to the node's actor or the grains
//     whose sender is at the address of a member that has not said who it
//     is (or has, as peer) is answered a retryable error; one from
//     elsewhere is not answered. A NodeInfo must name peer. A member's
//     gossip speaks for itself only about leaving and its heartbeat
//     ([guard.screenGossip]).
//
// Each refusal is counted ([Node.PeerRefusals]) and logged, at most once a
// second, without what the message carries.
func (g *guard) screen(peer string, b *remote.MessageBatch) error {
	for _, e := range b.Envelopes {
		if e.Target < 0 || int(e.Target) >= len(b.Targets) || e.Sender < 0 || int(e.Sender) > len(b.Senders) ||
			e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames) || e.SerializerId < 0 || e.SerializerId >= serializers ||
			b.Targets[e.Target] == nil || e.Sender > 0 && b.Senders[e.Sender-1] == nil || !knownType(b.TypeNames[e.TypeId]) {
			g.refuse(reasonMalformed, peer)
			return errMalformed
		}
	}
	sys := g.life.system()
	kept := b.Envelopes[:0]
	for _, e := range b.Envelopes {
		if reason := g.screenOne(sys, peer, b, e); reason != "" {
			g.refuse(reason, peer)
			continue
		}
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
	return nil
}

// screenOne returns why envelope e of batch b is refused; "" if it is
// not.
func (g *guard) screenOne(sys *actor.ActorSystem, peer string, b *remote.MessageBatch, e *remote.MessageEnvelope) string {
	typ := b.TypeNames[e.TypeId]
	if systemTypes[typ] {
		return reasonSystem
	}
	var sender *actor.PID
	if e.Sender > 0 {
		sender = b.Senders[e.Sender-1]
		if sys != nil && sender.Address == sys.Address() {
			return reasonOwnAddress
		}
	}
	t := g.members.topology()
	if peer == "" {
		if sender != nil && (t == nil || !t.hasAddress(sender.Address)) {
			return reasonSenderElsewhere
		}
		return ""
	}
	target := b.Targets[e.Target].Id
	switch {
	case typ == typeNodeInfo:
		info := &clusterpb.NodeInfo{}
		if e.SerializerId != 0 || proto.Unmarshal(e.MessageData, info) != nil || info.Node != peer {
			return reasonOtherNode
		}
		// An answer to this node's Hello comes from the node it asked: a
		// member whose address this node dialled (the Hello went there)
		// and found peer's certificate at. Not from a certificate holder
		// elsewhere, who would answer a joining node's Hello in its place.
		if !strings.HasPrefix(target, futurePrefix) || !g.dialledAs(t, peer) {
			return reasonNotAnswer
		}
		return ""
	case target == nodeActor && typ == typeHello:
		// A Hello is a member's (or a joining node's) question, sent to
		// be answered: with no sender it proves no membership, and the
		// tags it tells of would be a stranger's word.
		if sender == nil {
			return reasonNoSender
		}
		if !g.answerable(t, peer, sender.Address) {
			return reasonSenderNotMe
		}
		return ""
	}
	addrs := g.memberAddresses(peer)
	reason := ""
	switch {
	case len(addrs) == 0:
		reason = reasonNotMember
	case sender != nil && !contains(addrs, sender.Address):
		reason = reasonSenderNotMe
	case typ == typeGossipRequest || typ == typeGossipResponse:
		return g.screenGossip(peer, t, typ, e)
	default:
		return ""
	}
	// Answered only at the address of a member that may be peer (not one
	// that said it is another node: its pending requests are not peer's
	// to answer), and only by the node's actor and the grains, whose
	// callers read it as "try again".
	guarded := target == nodeActor || target == disthash.PartitionActivatorActorName || strings.HasPrefix(target, grainActorPrefix)
	if guarded && sender != nil && sys != nil && g.answerable(t, peer, sender.Address) {
		to := sender
		if e.SenderRequestId > 0 {
			to = proto.Clone(sender).(*actor.PID)
			to.RequestId = e.SenderRequestId
		}
		sys.Root.Send(to, &pacluster.GrainErrorResponse{Reason: pacluster.ErrorReason_UNAVAILABLE, Message: retryableRefusal})
	}
	return reason
}

// answerable reports whether a message of peer (the node its certificate
// names) may be answered at addr: the address of a current member that
// has said it is peer, or has not said who it is yet (a joining node).
// Not at another address: protoactor's remote would dial it (an address of
// the peer's choosing), nor at that of a member that said it is another
// node (its pending requests would read the answer).
func (g *guard) answerable(t *topology, peer, addr string) bool {
	if t == nil {
		return false
	}
	for _, m := range t.members {
		if m.Address() != addr {
			continue
		}
		if name, ok := g.members.saidName(m.Id); !ok || name == peer {
			return true
		}
	}
	return false
}

// screenGossip checks a gossip request or response of member peer (the
// sender checked): each member speaks only for itself about leaving and
// its heartbeat. protoactor's gossip blocks for good each member whose
// "left" key any gossip carries, and each whose heartbeat has not grown
// for a while (a heartbeat's sequence number set far ahead by another
// stops its real ones counting). Those two keys of any other member are
// taken out of the state (the message is kept: its sender's offsets move
// on); the other keys (topology, ...) are relayed as protoactor relays
// them. Each member gossips its own state to every other member at each
// tick (Start sets the gossip's fan-out past any cluster's size), so its
// heartbeat needs no relay. A gossip message in JSON is refused.
func (g *guard) screenGossip(peer string, t *topology, typ string, e *remote.MessageEnvelope) string {
	if e.SerializerId != 0 {
		return reasonMalformed
	}
	own := map[string]bool{}
	for _, m := range t.members {
		if name, ok := g.members.saidName(m.Id); ok && name == peer {
			own[m.Id] = true
		}
	}
	var (
		msg   proto.Message
		state *pacluster.GossipState
	)
	if typ == typeGossipRequest {
		req := &pacluster.GossipRequest{}
		msg = req
		if proto.Unmarshal(e.MessageData, req) != nil {
			return reasonMalformed
		}
		state = req.State
	} else {
		res := &pacluster.GossipResponse{}
		msg = res
		if proto.Unmarshal(e.MessageData, res) != nil {
			return reasonMalformed
		}
		state = res.State
	}
	changed := false
	for id, ms := range state.GetMembers() {
		if own[id] || ms == nil {
			continue
		}
		for _, key := range []string{pacluster.GracefullyLeftKey, pacluster.HeartbeatKey} {
			if _, ok := ms.Values[key]; ok {
				delete(ms.Values, key)
				changed = true
			}
		}
	}
	if !changed {
		return ""
	}
	data, err := proto.Marshal(msg)
	if err != nil {
		return reasonMalformed
	}
	e.MessageData = data
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// memberAddresses returns the addresses of the members that said they are
// node name, as this node sees the members now; none if name is not a
// member (or this node). It takes no lock that Start holds: it runs on
// the gRPC server's goroutines, while Start waits on protoactor.
func (g *guard) memberAddresses(name string) []string {
	t := g.members.topology()
	if t == nil || name == g.node {
		return nil
	}
	var out []string
	for _, m := range t.members {
		if said, ok := g.members.saidName(m.Id); ok && said == name {
			out = append(out, m.Address())
		}
	}
	return out
}

// refuse counts a message refused, and logs it at most once a second.
func (g *guard) refuse(reason, peer string) {
	count := g.peerRefusals.Add(1)
	if logNow(&g.refusalLogged) {
		attrs := []any{slog.String(logKeyNode, g.node), slog.String(logKeyReason, reason), slog.Int64(logKeyCount, count)}
		if peer != "" {
			attrs = append(attrs, slog.String(logKeyPeer, peer))
		}
		g.log.Warn("cluster peer message refused", attrs...)
	}
}
