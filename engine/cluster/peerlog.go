package cluster

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// failedConnect is the message of the line protoactor's remote logs at
// each failed attempt to connect to an address: a member that died, and
// retried for as long as it stays in the topology.
const failedConnect = "EndpointWriter failed to connect"

// peerLogHandler stands before protoactor's log filter (package actors'):
// an address in a protoactor line (an "address" attribute, a PID's) is
// kept only if it is this node's or a current member's, since protoactor
// logs the addresses it sends to, and a peer can name any address as a
// message's sender; another is taken out. And protoactor's line for each
// failed attempt to connect is logged at most once a second (counting
// those left out), since it repeats for each address it cannot reach. It
// is safe for concurrent use.
type peerLogHandler struct {
	h       slog.Handler
	members *memberList
	// failedLogged is when a failed connect was last logged (UnixNano),
	// shared by the handlers WithAttrs makes; failedQuiet counts those
	// left out since.
	failedLogged *atomic.Int64
	failedQuiet  *atomic.Int64
}

// peerLogger returns l (protoactor's logger) behind a [peerLogHandler] of
// members.
func peerLogger(l *slog.Logger, members *memberList) *slog.Logger {
	return slog.New(&peerLogHandler{h: l.Handler(), members: members, failedLogged: new(atomic.Int64), failedQuiet: new(atomic.Int64)})
}

func (p *peerLogHandler) Enabled(ctx context.Context, l slog.Level) bool { return p.h.Enabled(ctx, l) }

func (p *peerLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == failedConnect {
		if !logNow(p.failedLogged) {
			p.failedQuiet.Add(1)
			return nil
		}
		r = r.Clone()
		r.AddAttrs(slog.Int64("throttled", p.failedQuiet.Swap(0)))
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(at slog.Attr) bool {
		if p.known(at) {
			out.AddAttrs(at)
		}
		return true
	})
	return p.h.Handle(ctx, out)
}

func (p *peerLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var kept []slog.Attr
	for _, at := range as {
		if p.known(at) {
			kept = append(kept, at)
		}
	}
	return &peerLogHandler{h: p.h.WithAttrs(kept), members: p.members, failedLogged: p.failedLogged, failedQuiet: p.failedQuiet}
}

func (p *peerLogHandler) WithGroup(name string) slog.Handler {
	return &peerLogHandler{h: p.h.WithGroup(name), members: p.members, failedLogged: p.failedLogged, failedQuiet: p.failedQuiet}
}

// known reports whether attribute at may be logged: it names no address,
// or this node's, or a current member's.
func (p *peerLogHandler) known(at slog.Attr) bool {
	v := at.Value.Resolve()
	switch {
	case at.Key == logKeyAddress && v.Kind() == slog.KindString:
		return p.members.knownAddress(v.String())
	case at.Key == logKeyAddress:
		return false
	case v.Kind() == slog.KindAny:
		if pid, ok := v.Any().(*actor.PID); ok && pid != nil {
			return p.members.knownAddress(pid.Address)
		}
	}
	return true
}
