package actors

import (
	"context"
	"log/slog"
	"slices"
	"strings"
)

// Log keys. Log lines carry job ids, counts and statuses: never a URL, a
// host, a key or a panic value.
const (
	keyJobID   = "job_id"
	keyIdx     = "idx"
	keyStatus  = "status"
	keyCount   = "count"
	keyErr     = "err"
	keyStack   = "stack"
	keyWorker  = "worker"
	keyLive    = "live"
	keyLibrary = "lib"
	keyHook    = "hook"
)

// ActorSystemLogger returns the logger to give protoactor: it writes to l's
// handler with the library's levels lowered by one step (its Info is our
// Debug, its Error our Warn) and with only the attributes known to be safe
// kept. protoactor logs the failing message and the panic reason of every
// failure, and dead letters with their message; our messages carry URLs, so
// those attributes are dropped. A few of its messages are an error's text
// (its Kubernetes provider's "unable to watch pods: " and the API server's
// URL): a message is cut at its first ": ", and one that still holds an
// address or a printed value is withheld (see [safeMessage]).
func ActorSystemLogger(l *slog.Logger) *slog.Logger {
	return ActorSystemLoggerKeeping(l)
}

// ActorSystemLoggerKeeping is [ActorSystemLogger] that also keeps the
// attributes named keep: a cluster's member addresses, say.
func ActorSystemLoggerKeeping(l *slog.Logger, keep ...string) *slog.Logger {
	safe := append(slices.Clip(safeActorAttrs), keep...)
	return slog.New(&actorSystemHandler{h: l.Handler(), safe: safe}).With(slog.String(keyLibrary, "protoactor"))
}

// safeActorAttrs are the protoactor attributes kept: actor ids (ours are
// named by job id), directives and counts.
var safeActorAttrs = []string{keyLibrary, "system", "id", "self", "pid", "actor", "directive", "throttled"}

type actorSystemHandler struct {
	h    slog.Handler
	safe []string // the attributes kept
}

func lower(l slog.Level) slog.Level {
	switch {
	case l >= slog.LevelError:
		return slog.LevelWarn
	case l >= slog.LevelWarn:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

func (a *actorSystemHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return a.h.Enabled(ctx, lower(l))
}

func (a *actorSystemHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, lower(r.Level), safeMessage(r.Message), r.PC)
	r.Attrs(func(at slog.Attr) bool {
		if slices.Contains(a.safe, at.Key) {
			out.AddAttrs(slog.String(at.Key, at.Value.String()))
		}
		return true
	})
	return a.h.Handle(ctx, out)
}

// withheldMessage replaces a protoactor message that would carry an
// address or a printed value.
const withheldMessage = "protoactor message withheld (it held an address or a value)"

// safeMessage is msg without what a library appends to it: the text after
// its first ": " (an error's, by Go's convention), and msg withheld whole
// if what is left still holds a URL or a path ('/'), a printed Go value
// ('{') or an address ('@').
func safeMessage(msg string) string {
	if i := strings.Index(msg, ": "); i >= 0 {
		msg = msg[:i]
	}
	if strings.ContainsAny(msg, "{@/") {
		return withheldMessage
	}
	return msg
}

func (a *actorSystemHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var kept []slog.Attr
	for _, at := range as {
		if slices.Contains(a.safe, at.Key) {
			kept = append(kept, slog.String(at.Key, at.Value.String()))
		}
	}
	return &actorSystemHandler{h: a.h.WithAttrs(kept), safe: a.safe}
}

func (a *actorSystemHandler) WithGroup(name string) slog.Handler {
	return &actorSystemHandler{h: a.h.WithGroup(name), safe: a.safe}
}
