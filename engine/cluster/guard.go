package cluster

import (
	"context"
	"log/slog"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// transport returns the options of protoactor's remote that make its gRPC
// server and its dials this node's: the cluster's mutual TLS, unless
// Insecure (protoactor's default dial option is plaintext, replaced here,
// not added to), and the guards of the server, whatever the mode.
func (n *Node) transport() []remote.ConfigOption {
	server := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(n.unaryGuard),
		grpc.ChainStreamInterceptor(n.streamGuard),
	}
	if n.cfg.TLS == nil {
		return []remote.ConfigOption{remote.WithServerOptions(server...)}
	}
	server = append(server, grpc.Creds(credentials.NewTLS(n.cfg.TLS.Server())))
	return []remote.ConfigOption{
		remote.WithServerOptions(server...),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(n.cfg.TLS.Client()))),
	}
}

// PeerPanics returns how many calls of peers to this node's gRPC server
// have panicked (in protoactor's remote, on what a peer sent) since it
// started: each ended that call or stream, and the node went on. It is
// safe for concurrent use.
func (n *Node) PeerPanics() int64 { return n.peerPanics.Load() }

// unaryGuard is the gRPC server's unary interceptor: a panic ends the call
// with codes.Internal.
func (n *Node) unaryGuard(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer n.recoverPeer(&err)
	return handler(ctx, req)
}

// streamGuard is the gRPC server's stream interceptor: a panic ends the
// stream with codes.Internal.
func (n *Node) streamGuard(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer n.recoverPeer(&err)
	return handler(srv, ss)
}

// recoverPeer, deferred, turns a panic of a peer's call into err
// (codes.Internal), counted and logged without its value (it may carry
// what the peer sent).
func (n *Node) recoverPeer(err *error) {
	if v := recover(); v != nil {
		count := n.peerPanics.Add(1)
		n.log.Warn("cluster peer call panicked: ended", slog.String(logKeyNode, n.cfg.Node), slog.Int64(logKeyCount, count))
		*err = status.Error(codes.Internal, "internal error")
	}
}
