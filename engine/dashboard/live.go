package dashboard

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ticker wakes every event stream at once: wait returns a channel that
// the next fire closes. Safe for concurrent use.
type ticker struct {
	mu sync.Mutex
	ch chan struct{}
}

func (t *ticker) init() { t.ch = make(chan struct{}) }

func (t *ticker) wait() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ch
}

func (t *ticker) fire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	close(t.ch)
	t.ch = make(chan struct{})
}

// loop is the dashboard's one goroutine: every Refresh it samples the
// charts and wakes the event streams. Close ends it.
func (h *Handler) loop() {
	defer h.wg.Done()
	t := time.NewTicker(h.o.Refresh)
	defer t.Stop()
	h.tick(time.Now())
	for {
		select {
		case <-h.ctx.Done():
			return
		case now := <-t.C:
			h.tick(now)
		}
	}
}

func (h *Handler) tick(now time.Time) {
	if h.o.Gatherer != nil {
		h.stats.sample(h.o.Gatherer, now, h.o.ChartStep)
	}
	h.ticks.fire()
}

// events is GET /ui/events (?job=ID for a job page; ?list=1 with the jobs
// page's status and caller for its first page): Server-Sent Events,
// an "update" event with the page's live part, rendered again every
// Refresh and sent when it has changed. The stream ends when the client
// leaves, when the session ends (a "signedout" event), when the job is
// gone (a "gone" event), and on Close. It is exempt from the server's
// WriteTimeout: each write has a deadline of its own instead. A session
// holds at most maxStreams (16) at once, a caller at most
// maxCallerStreams (32) across its sessions: past either, 429.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, ss *session) {
	if ss.streams.Add(1) > maxStreams {
		ss.streams.Add(-1)
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many live views open: close a tab", http.StatusTooManyRequests)
		return
	}
	defer ss.streams.Add(-1)
	if !h.streams.take(ss.name) {
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many live views open for this key: close a tab or sign out elsewhere", http.StatusTooManyRequests)
		return
	}
	defer h.streams.give(ss.name)
	jobID := r.URL.Query().Get("job")
	list := r.URL.Query().Get("list") == "1"
	ctx := r.Context()
	// render renders the page's live part: ok false when it is gone;
	// skip when it cannot be read now (a job of a node that did not
	// answer): nothing is sent then.
	render := func(ss *session) (b []byte, ok, skip bool) {
		var buf bytes.Buffer
		var err error
		switch {
		case list:
			q := parseJobsQuery(r.URL.Query(), ss)
			if q.stream() == "" {
				return nil, false, false
			}
			v := h.jobsView(ctx, ss, q)
			if v.Busy {
				return nil, true, true // refused: nothing sent now
			}
			if v.Msg != "" {
				return nil, false, false
			}
			err = h.tpl.ExecuteTemplate(&buf, "jobs-main", v)
		case jobID == "":
			var v overviewView
			if h.reads.Read(ctx, ss.name, func() { v = h.overviewView(ctx, ss) }) != nil {
				return nil, true, true // refused, or gone: nothing sent now
			}
			err = h.tpl.ExecuteTemplate(&buf, "overview-main", v)
		default:
			var (
				v    jobPageView
				ok   bool
				rerr error
			)
			if h.reads.Read(ctx, ss.name, func() { v, ok, rerr = h.jobPageView(ctx, jobID, ss) }) != nil {
				return nil, true, true // refused, or gone: nothing sent now
			}
			switch {
			case !ok:
				return nil, false, false
			case rerr != nil:
				return nil, true, true
			}
			err = h.tpl.ExecuteTemplate(&buf, "job-main", v)
		}
		return buf.Bytes(), err == nil, false
	}
	first, ok, skip := render(ss)
	switch {
	case !ok:
		h.jobNotFound(w, r)
		return
	case skip:
		w.Header().Set("Retry-After", "5")
		http.Error(w, "the node that holds this job did not answer: try again in a while", http.StatusServiceUnavailable)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	send := func(event string, data []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeWait)) // not supported by a test recorder: fine
		var b bytes.Buffer
		b.WriteString("event: " + event + "\n")
		// A browser ends an event-stream line at \r, \n or \r\n: text of
		// the page (an error a site sent, a URL) with a bare \r must not
		// start a line, or an event, of its own.
		text := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
		for line := range strings.SplitSeq(text, "\n") {
			b.WriteString("data: " + line + "\n")
		}
		b.WriteString("\n")
		if _, err := w.Write(b.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	w.WriteHeader(http.StatusOK)
	if !send("update", first) {
		return
	}
	last := first
	for {
		wake := h.ticks.wait()
		select {
		case <-r.Context().Done():
			return
		case <-h.ctx.Done():
			return
		case <-wake:
		}
		cur, ok := h.session(r)
		if !ok {
			send("signedout", nil)
			return
		}
		b, ok, skip := render(cur)
		switch {
		case !ok:
			send("gone", nil)
			return
		case skip:
			continue
		}
		if !bytes.Equal(b, last) {
			if !send("update", b) {
				return
			}
			last = b
		}
	}
}

// writeWait bounds one write of an event stream: a client that stops
// reading is dropped.
const writeWait = 10 * time.Second
