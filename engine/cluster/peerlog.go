package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

const (
	// peerWarnEvery is the period in which protoactor's lines at Warn or
	// above are logged at most once for each message and peer address:
	// while a peer is down, protoactor logs a line at each failed poll of
	// its health, at each attempt to connect to it, at each stream it
	// cannot open (about 29 lines in 10 s on each node that survives).
	peerWarnEvery = 5 * time.Second
	// maxRepeatKeys bounds the kinds of line peerWarnEvery counts (a
	// message and a member's address each): past it they are forgotten,
	// and the next of each is logged.
	maxRepeatKeys = 1024
)

// peerLogHandler stands before protoactor's log filter (package actors'):
// an address in a protoactor line (an "address" attribute, a PID's) is
// kept only if it is this node's or a current member's, since protoactor
// logs the addresses it sends to, and a peer can name any address as a
// message's sender; another is taken out. And a line of protoactor's at
// Warn or above is logged at most once per peerWarnEvery for each message
// and peer address, with "throttled", the count of those left out since,
// since protoactor repeats them for as long as a peer is down. It is safe
// for concurrent use.
type peerLogHandler struct {
	h       slog.Handler
	members *memberList
	repeats *repeatLimiter // shared by the handlers WithAttrs makes
}

// repeatLimiter counts the lines of each kind, and says which may be
// logged. It is safe for concurrent use.
type repeatLimiter struct {
	now func() time.Time

	mu   sync.Mutex
	last map[repeatKey]*repeat
}

// repeatKey is a kind of line: its message, and the peer's address ("" if
// it names none, or one that is not a member's).
type repeatKey struct{ msg, addr string }

// repeat is when a kind of line was last logged, and how many were left
// out since.
type repeat struct {
	at    time.Time
	quiet int64
}

// allow reports whether a line of kind k may be logged now, and how many
// of that kind were left out since the last one logged.
func (r *repeatLimiter) allow(k repeatKey) (bool, int64) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.last[k]
	if ok && now.Sub(e.at) < peerWarnEvery {
		e.quiet++
		return false, 0
	}
	if !ok {
		if len(r.last) >= maxRepeatKeys {
			clear(r.last)
		}
		e = &repeat{}
		r.last[k] = e
	}
	quiet := e.quiet
	e.at, e.quiet = now, 0
	return true, quiet
}

// peerLogger returns l (protoactor's logger) behind a [peerLogHandler] of
// members.
func peerLogger(l *slog.Logger, members *memberList) *slog.Logger {
	return peerLoggerAt(l, members, time.Now)
}

// peerLoggerAt is peerLogger on the clock now.
func peerLoggerAt(l *slog.Logger, members *memberList, now func() time.Time) *slog.Logger {
	return slog.New(&peerLogHandler{h: l.Handler(), members: members, repeats: &repeatLimiter{now: now, last: map[repeatKey]*repeat{}}})
}

func (p *peerLogHandler) Enabled(ctx context.Context, l slog.Level) bool { return p.h.Enabled(ctx, l) }

func (p *peerLogHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	addr := ""
	r.Attrs(func(at slog.Attr) bool {
		if p.known(at) {
			out.AddAttrs(at)
			if v := at.Value.Resolve(); at.Key == logKeyAddress && v.Kind() == slog.KindString && addr == "" {
				addr = v.String()
			}
		}
		return true
	})
	if r.Level >= slog.LevelWarn {
		ok, quiet := p.repeats.allow(repeatKey{msg: r.Message, addr: addr})
		if !ok {
			return nil
		}
		if quiet > 0 {
			out.AddAttrs(slog.Int64("throttled", quiet))
		}
	}
	return p.h.Handle(ctx, out)
}

func (p *peerLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var kept []slog.Attr
	for _, at := range as {
		if p.known(at) {
			kept = append(kept, at)
		}
	}
	return &peerLogHandler{h: p.h.WithAttrs(kept), members: p.members, repeats: p.repeats}
}

func (p *peerLogHandler) WithGroup(name string) slog.Handler {
	return &peerLogHandler{h: p.h.WithGroup(name), members: p.members, repeats: p.repeats}
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
