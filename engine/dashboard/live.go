package dashboard

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sift/batch/engine"
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

// loop is the dashboard's one goroutine: every Refresh it notes the live
// jobs (for the list of recently finished ones), samples the charts, and
// wakes the event streams. Close ends it.
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
	h.recent.update(h.r)
	if h.o.Gatherer != nil {
		h.stats.sample(h.o.Gatherer, now, h.o.ChartStep)
	}
	h.ticks.fire()
}

// recent are the jobs the dashboard has seen, live or opened, newest
// first, so that the admin's overview can list the ones that have
// finished. The engine has no listing across callers yet: a job that
// started and ended between two looks is not listed. Safe for concurrent
// use.
type recent struct {
	mu   sync.Mutex
	ids  []string // oldest first
	jobs map[string]engine.Job
}

// maxRecent bounds the jobs remembered.
const maxRecent = 200

// put records j, the caller holding mu.
func (rc *recent) put(j engine.Job) {
	if rc.jobs == nil {
		rc.jobs = make(map[string]engine.Job)
	}
	if _, ok := rc.jobs[j.ID]; !ok {
		rc.ids = append(rc.ids, j.ID)
		if len(rc.ids) > maxRecent {
			delete(rc.jobs, rc.ids[0])
			rc.ids = slices.Delete(rc.ids, 0, 1)
		}
	}
	rc.jobs[j.ID] = j
}

// drop forgets id (it is gone from the store), the caller holding mu.
func (rc *recent) drop(id string) {
	delete(rc.jobs, id)
	rc.ids = slices.DeleteFunc(rc.ids, func(s string) bool { return s == id })
}

// note records live jobs as a page has just read them.
func (rc *recent) note(live []engine.Job) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, j := range live {
		rc.put(j)
	}
}

// update notes the live jobs, and reads once the summary of each noted
// job that is no longer live: a finished job's summary does not change.
func (rc *recent) update(r runner) {
	live := r.Live()
	rc.mu.Lock()
	now := make(map[string]bool, len(live))
	for _, j := range live {
		now[j.ID] = true
		rc.put(j)
	}
	var ended []string
	for id, j := range rc.jobs {
		if engine.IsLive(j.Status) && !now[id] {
			ended = append(ended, id)
		}
	}
	rc.mu.Unlock()
	for _, id := range ended {
		j, ok := r.Job(id)
		rc.mu.Lock()
		if ok {
			rc.put(j)
		} else {
			rc.drop(id)
		}
		rc.mu.Unlock()
	}
}

// add notes a job opened by id.
func (rc *recent) add(r runner, id string) {
	if j, ok := r.Job(id); ok {
		rc.mu.Lock()
		rc.put(j)
		rc.mu.Unlock()
	}
}

// finished returns up to n finished jobs that keep admits, newest first.
func (rc *recent) finished(keep func(engine.Job) bool, n int) []engine.Job {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []engine.Job
	for i := len(rc.ids) - 1; i >= 0 && len(out) < n; i-- {
		j := rc.jobs[rc.ids[i]]
		if !engine.IsLive(j.Status) && keep(j) {
			out = append(out, j)
		}
	}
	return out
}

// events is GET /ui/events (?job=ID for a job page): Server-Sent Events,
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
	render := func(ss *session) ([]byte, bool) {
		var buf bytes.Buffer
		var err error
		if jobID == "" {
			err = h.tpl.ExecuteTemplate(&buf, "overview-main", h.overviewView(ss))
		} else {
			v, ok := h.jobPageView(jobID, ss)
			if !ok {
				return nil, false
			}
			err = h.tpl.ExecuteTemplate(&buf, "job-main", v)
		}
		return buf.Bytes(), err == nil
	}
	first, ok := render(ss)
	if !ok {
		h.jobNotFound(w)
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
		b, ok := render(cur)
		if !ok {
			send("gone", nil)
			return
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
