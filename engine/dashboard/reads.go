package dashboard

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"runtime"

	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/internal/readsched"
)

// Reads is the road every read of the dashboard takes: each page's reads
// of the runner run in a turn of the caller's, shared fairly by caller
// with every other read of the server. package httpapi's *Handler is one
// ([httpapi.Handler.Read]): with it, the dashboard's reads and the API's
// (and the MCP tools', which call the API) share the same turns. Read
// returns [httpapi.ErrReadsQueued], fn not run, when the caller has too
// many reads waiting; ctx's error when it ends first. Its methods are
// called from many requests at once.
type Reads interface {
	Read(ctx context.Context, caller string, fn func()) error
}

// DefaultMaxQueuedReads is each caller's bound of reads waiting on the
// dashboard's own Reads (when [Options.Reads] is nil).
const DefaultMaxQueuedReads = httpapi.DefaultMaxQueuedReads

// ownReads is the dashboard's Reads when Options.Reads is nil: turns of
// its own (GOMAXPROCS/2, at least 1), fair by caller.
type ownReads struct{ s *readsched.Scheduler }

func newOwnReads() ownReads {
	return ownReads{readsched.New(max(runtime.GOMAXPROCS(0)/2, 1), DefaultMaxQueuedReads)}
}

func (o ownReads) Read(ctx context.Context, caller string, fn func()) error {
	return o.s.Do(ctx, caller, fn)
}

// errBusy is a read refused: the caller's reads waiting fill its queue.
var errBusy = httpapi.ErrReadsQueued

// read runs fn in a turn of ss's caller; false, having answered 429 with
// Retry-After (or nothing, the client gone), if it was refused.
func (h *Handler) readTurn(w http.ResponseWriter, r *http.Request, ss *session, fn func()) bool {
	err := h.reads.Read(r.Context(), ss.name, fn)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errBusy):
		h.tooManyReads(w, r)
	}
	return false
}

// tooManyReads answers 429: the caller has too many reads waiting.
func (h *Handler) tooManyReads(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "5")
	h.page(w, r, http.StatusTooManyRequests, "error", errorPage{Title: "Too many reads",
		Msg: "Too many reads of yours wait for their turn already: try again in a few seconds.", Back: Prefix})
}

// inTurn runs fn, a page whose reads and rendering are short, in a turn
// of the session's caller: the page is rendered into memory while the
// turn is held, and sent to the client once it is given up, so a client
// that reads slowly holds no turn.
func (h *Handler) inTurn(fn func(http.ResponseWriter, *http.Request, *session)) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, ss *session) {
		pb := &pageBuffer{header: w.Header()}
		if !h.readTurn(w, r, ss, func() { fn(pb, r, ss) }) {
			return
		}
		if pb.code == 0 {
			pb.code = http.StatusOK
		}
		w.WriteHeader(pb.code)
		_, _ = w.Write(pb.body.Bytes())
	}
}

// pageBuffer keeps a page's status and body; its header is the real
// writer's. Not for concurrent use.
type pageBuffer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (p *pageBuffer) Header() http.Header { return p.header }

func (p *pageBuffer) WriteHeader(code int) {
	if p.code == 0 {
		p.code = code
	}
}

func (p *pageBuffer) Write(b []byte) (int, error) {
	if p.code == 0 {
		p.code = http.StatusOK
	}
	return p.body.Write(b)
}
