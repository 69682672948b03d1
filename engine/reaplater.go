package engine

// The jobs a crash left live, on a store that cannot write yet. New fails
// every job the store holds as queued or running ("restart": jobs never
// resume), and that is a write. A store a crash left on a full disk opens
// read-only (persistence/fullopen.go), and every write fails with an error
// wrapping ErrDiskFull until there is room: New does not fail for that (a
// node restarted on a full disk serves its reads). It notes the jobs it
// could not fail and fails them in the store once it can: a goroutine
// tries every reapEvery, and Submit tries first (and refuses while it
// cannot: a job a crash left "running" in the store must not be reused by
// an idempotent submit). Meanwhile every read answers those jobs as the
// reap will leave them, failed "restart": no actor owns them, and none
// ever will.

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sift/batch/persistence"
)

// reapEvery is how often the runner tries to fail the jobs a crash left
// live, while the store cannot write: the disk watch's period.
const reapEvery = persistence.DefaultDiskEvery

// unreaped are the jobs a crash left live that the store could not fail
// yet; the zero value holds none.
type unreaped struct {
	mu   sync.Mutex                          // one reap at a time
	ids  atomic.Pointer[map[string]struct{}] // nil: none left
	at   int64                               // when New found them (unix nanos): their Ended as read
	stop chan struct{}                       // closed by Shutdown
	done chan struct{}                       // closed when the goroutine has returned
}

// reapLater notes the jobs the store holds live, which reap could not fail
// (err, wrapping ErrDiskFull); New then starts reapLoop.
func (r *Runner) reapLater(err error) error {
	left, rerr := r.store.Unsettled()
	if rerr != nil {
		return fmt.Errorf("reap: %w", rerr)
	}
	ids := make(map[string]struct{}, len(left))
	for i := range left {
		if persistence.IsLive(left[i].Status) {
			ids[left[i].ID] = struct{}{}
		}
	}
	r.unreaped.at = r.cfg.Now().UnixNano()
	r.unreaped.ids.Store(&ids)
	r.unreaped.stop = make(chan struct{})
	r.unreaped.done = make(chan struct{})
	r.log.Warn("the jobs a previous run left live are failed once the disk has room",
		slog.Int(keyCount, len(ids)), slog.String(keyErr, storeErrText(err)))
	return nil
}

// reapLoop tries to fail the jobs a crash left live every reapEvery, until
// it has, or the runner stops.
func (r *Runner) reapLoop() {
	defer close(r.unreaped.done)
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for r.unreaped.ids.Load() != nil {
		select {
		case <-r.unreaped.stop:
			return
		case <-t.C:
			_ = r.reapPending()
		}
	}
}

// reapPending fails the jobs a crash left live, if the store can write
// now; nil once none is left.
func (r *Runner) reapPending() error {
	if r.unreaped.ids.Load() == nil {
		return nil
	}
	r.unreaped.mu.Lock()
	defer r.unreaped.mu.Unlock()
	if r.unreaped.ids.Load() == nil {
		return nil
	}
	n, err := r.reap(reapRestart)
	if err != nil {
		return err
	}
	r.unreaped.ids.Store(nil)
	r.log.Info("failed the jobs a previous run left live, now that the disk has room", slog.Int(keyCount, n))
	return nil
}

// stopReaping stops reapLoop, if it runs, and waits for it (Shutdown).
func (r *Runner) stopReaping() {
	if r.unreaped.stop == nil {
		return
	}
	close(r.unreaped.stop)
	<-r.unreaped.done
}

// submitReaped is Submit's check: the jobs a crash left live are failed in
// the store first (an idempotent submit must not reuse one); an error
// wrapping ErrDiskFull while they cannot be.
func (r *Runner) submitReaped() error {
	err := r.reapPending()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrDiskFull):
		return fmt.Errorf("%w: the jobs a restart left live cannot be failed yet", ErrDiskFull)
	}
	return fmt.Errorf("fail the jobs a restart left live: %w", err)
}

// asReaped lays the reap over a row read from the store: a job a crash
// left live that the store could not fail yet reads failed "restart", as
// the reap will leave it.
func (r *Runner) asReaped(rec *persistence.JobRecord) {
	m := r.unreaped.ids.Load()
	if m == nil || !persistence.IsLive(rec.Status) {
		return
	}
	if _, ok := (*m)[rec.ID]; ok {
		rec.Status, rec.Error, rec.Ended = persistence.StatusFailed, reapRestart, max(r.unreaped.at, rec.Started)
	}
}
