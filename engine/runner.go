package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sift/batch/actors"
	"github.com/sift/batch/persistence"
)

// Runner runs batch jobs: it stores each job, fetches its targets one at a
// time, fairly across jobs, with [Config.Workers] workers, and stores every
// result as it lands. Create one with [Open] (on a store of its own) or
// [New] (on a store the caller opens); stop it with [Runner.Close].
// All methods are safe for concurrent use.
type Runner struct {
	store  *persistence.Store
	fetch  FetchFunc
	cfg    Config
	log    *slog.Logger
	sys    *actors.System
	views  *actors.Views      // what the job actors publish for readers
	cancel context.CancelFunc // cancels the fetches' context
	// ownsStore is set by [Open]: Shutdown closes the store.
	ownsStore bool

	mu       sync.RWMutex // closed and failed are set under mu held for writing
	closed   bool
	failed   bool
	done     chan struct{} // closed once the runner has stopped (Close, or failed)
	failDone chan struct{} // closed once a failed runner has failed its jobs
	// shutting is set by the first Shutdown; shutDone is closed once it
	// has returned.
	shutting atomic.Bool
	shutDone chan struct{}

	// For a runner that owns its store: the jobs Wait waits for, each as
	// Shutdown read it just before it closed the store (storeGone), so
	// that a waiter woken by the stop answers the job as the stop left it.
	waitMu    sync.Mutex
	waits     map[string]*waited
	storeGone bool

	// refused counts the submits refused at a cap (refusals.go).
	refused refusals
	// classes are the live jobs' caller classes (classes.go).
	classes liveClasses
	// unreaped are the jobs a crash left live that the store could not
	// fail yet (reaplater.go).
	unreaped unreaped
}

// waited is a job some Waits wait for, on a runner that owns its store.
type waited struct {
	n   int // how many
	job Job // as Shutdown left it (storeGone)
}

// submission is what a job's actor holds for the FetchFunc: the caller and
// the targets, in memory only.
type submission struct {
	caller  *Caller
	targets []Target
}

// New starts a runner on store. A nil store or fetch, a negative [Config]
// field, or [DurabilitySync] with a store in memory is an error; zero
// fields take their defaults; a nil log logs nothing. Badger's own log
// lines go to log too, quietly. New makes the store durable, or not, as
// cfg.Durability says ([persistence.Store.SetDurable]).
//
// Before it returns, every job the store holds as queued or running (left by
// a crash: jobs never resume) is set failed with the error "restart"; its
// stored targets stay readable.
func New(store *persistence.Store, fetch FetchFunc, cfg Config, log *slog.Logger) (*Runner, error) {
	if store == nil {
		return nil, errors.New("new runner: nil store")
	}
	if fetch == nil {
		return nil, errors.New("new runner: nil fetch func")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	if cfg.Durability == DurabilitySync && store.Dir() == "" {
		return nil, errors.New("new runner: config Durability sync needs a store on disk, not in memory")
	}
	if err := store.SetDurable(cfg.Durability == DurabilitySync); err != nil {
		return nil, fmt.Errorf("new runner: config Durability: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	store.SetLogger(log)
	logRecovery(log, store.Recovery())
	if err := store.WatchDisk(persistence.DiskWatch{Reserve: cfg.DiskReserve, Now: cfg.Now}); errors.Is(err, ErrDiskReserve) {
		return nil, fmt.Errorf("new runner: config DiskReserve: %w", err)
	} else if err != nil {
		log.Warn("measure free disk space", slog.String(keyErr, err.Error())) // the watch goes on
	}
	rememberTag(cfg.NodeTag) // for ShortID
	// A store that cannot list its tags fails the reads below as well.
	if tags, err := store.NodeTags(); err == nil {
		for tag := range tags {
			rememberTag(tag[:])
		}
	}
	r := &Runner{store: store, fetch: fetch, cfg: cfg, log: log, views: &actors.Views{},
		done: make(chan struct{}), failDone: make(chan struct{}), shutDone: make(chan struct{})}
	if n, err := r.reap(reapRestart); errors.Is(err, ErrDiskFull) {
		if err := r.reapLater(err); err != nil { // the store cannot write yet: see reaplater.go
			return nil, fmt.Errorf("new runner: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	} else if n > 0 {
		r.log.Info("failed the jobs a previous run left live", slog.Int(keyCount, n))
	}
	// Reaping settled jobs (and MaxBytes may be lower than the last run's):
	// make room now, not at the first stored target.
	// A failure is left for the next eviction, after a stored target.
	if n, err := store.Evict(cfg.MaxBytes); err != nil {
		r.log.Warn("evict", slog.String(keyErr, storeErrText(err)))
	} else if n > 0 {
		r.log.Info("evicted jobs past max bytes", slog.Int(keyCount, n))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.sys, err = actors.Start(&actors.Config{
		Config:       cfg,
		Store:        store,
		Fetch:        r.fetchOne,
		FetchContext: ctx,
		Log:          log,
		Views:        r.views,
		OnFail:       r.failClosed,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("new runner: %w", err)
	}
	if r.unreaped.ids.Load() != nil {
		go r.reapLoop()
	}
	return r, nil
}

// The errors reap stores for the jobs it fails.
const (
	reapRestart  = "restart"         // left live by a process that stopped
	reapInternal = internalErrorText // left live by a runner that failed
)

// reap fails with text every job the store holds as queued or running, and
// settles the ones left cancelled with a target in flight; it returns how
// many it failed. No actor may own any of them.
func (r *Runner) reap(text string) (int, error) {
	left, err := r.dropUnreadable()
	if err != nil {
		return 0, fmt.Errorf("reap: %w", err)
	}
	failed := 0
	now := r.cfg.Now().UnixNano()
	for i := range left {
		j := &left[i]
		live := persistence.IsLive(j.Status)
		if live {
			j.Status, j.Error, j.Ended = persistence.StatusFailed, text, max(now, j.Started)
			failed++
		}
		j.Settled = true
		if err := r.store.SaveJob(j); err != nil {
			return failed, fmt.Errorf("reap: %w", err)
		}
		if live {
			actors.Reaped(r.cfg.TracerProvider, j, text) // the caller's trace shows the job's end
		}
	}
	return failed, nil
}

// Submit stores a job of targets for c and returns its id; the job then runs
// in the background. callerClass is the caller's class as sift knows it; the
// runner does not use it.
//
// In order: a nil c, an empty c.Name, or a target with an empty URL or a URL
// or option that is not valid UTF-8 is an error wrapping [ErrInvalid]; after [Runner.Close] [ErrClosed]; no targets
// [ErrNoTargets]. If c.Name already has a job with the same targets that is
// queued, running, done or partial and not expired, its id is returned with
// reused true and nothing else happens. Then the caps: [ErrTooManyTargets],
// [ErrCallerBusy], [ErrBusy]. The job and its targets are stored before
// Submit returns. While the store's disk is below [Config.DiskReserve]
// (after the checks of the request, before reuse and the caps), or when
// the store's write finds the disk full, an error wrapping [ErrDiskFull].
//
// ctx is checked before the job is submitted; a done ctx returns its error.
// With [Config.TracerProvider] set, the job's span is a child of ctx's
// span (an HTTP request's, carrying its caller's traceparent), and the job
// keeps that trace context in its row.
// Submit is SubmitWith with no [SubmitOptions].
func (r *Runner) Submit(ctx context.Context, c *Caller, callerClass string, targets []Target) (id string, reused bool, err error) {
	return r.SubmitWith(ctx, c, callerClass, targets, SubmitOptions{})
}

// MaxIdempotencyKey is the longest [SubmitOptions.IdempotencyKey], in bytes.
const MaxIdempotencyKey = 255

// SubmitOptions are the options of [Runner.SubmitWith]. The zero value is
// [Runner.Submit]'s behaviour.
type SubmitOptions struct {
	// IdempotencyKey, if not empty, is the caller's own key for the job
	// (an HTTP Idempotency-Key header): it replaces the key derived from
	// the targets, for that caller only. It is 1 to [MaxIdempotencyKey]
	// bytes of printable UTF-8 (spaces allowed inside, not at either
	// end; no control characters, see [CheckIdempotencyKey]);
	// another is an error wrapping [ErrInvalid]. While the job it made is
	// reusable (by the rules of [Runner.Submit]: queued, running, done or
	// partial, and not expired) the key is bound to that job's targets: the
	// same key with the same targets returns that job, reused; with other
	// targets [ErrIdempotencyMismatch]. Once that job failed, was
	// cancelled or expired, the key is free: it makes a new job. Keys are
	// hashed apart from derived ones (a prefix of their own), so a key
	// never matches a job submitted without one. In a cluster the rule
	// holds across nodes: the caller's grain keeps the key with a hash of
	// its targets ([Peer.TargetsHash]) and answers ErrIdempotencyMismatch
	// for another body, whichever node the key's job is on.
	//
	// Default "": the key is derived from the caller and the targets.
	IdempotencyKey string
}

// SubmitWith is [Runner.Submit] with options: an idempotency key of the
// caller's own ([SubmitOptions.IdempotencyKey]). Safe for concurrent use.
func (r *Runner) SubmitWith(ctx context.Context, c *Caller, callerClass string, targets []Target, opt SubmitOptions) (id string, reused bool, err error) {
	if opt.IdempotencyKey != "" {
		if err := CheckIdempotencyKey(opt.IdempotencyKey); err != nil {
			return "", false, err
		}
	}
	switch {
	case c == nil:
		return "", false, fmt.Errorf("%w: nil caller", ErrInvalid)
	case c.Name == "":
		return "", false, fmt.Errorf("%w: empty caller name", ErrInvalid)
	}
	for i := range targets {
		if targets[i].URL == "" {
			return "", false, fmt.Errorf("%w: target %d has an empty URL", ErrInvalid, i)
		}
		if !validUTF8(&targets[i]) {
			return "", false, fmt.Errorf("%w: target %d is not valid UTF-8", ErrInvalid, i)
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return "", false, ErrClosed
	}
	if len(targets) == 0 {
		return "", false, ErrNoTargets
	}
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	if err := r.submitReaped(); err != nil {
		return "", false, err
	}
	m, err := r.newSubmit(c, targets, opt.IdempotencyKey)
	if err != nil {
		return "", false, err
	}
	m.Ctx = ctx // a traced job's span is a child of ctx's
	adm := r.cfg.Admission
	var body string // the hash of the targets a key of the caller's own is bound to
	if adm != nil && opt.IdempotencyKey != "" {
		body = targetsHash(m.Targets)
	}
	if adm != nil {
		if len(targets) > r.cfg.TargetsPerJob {
			return "", false, ErrTooManyTargets // before asking: a job that cannot be is no one's to admit
		}
		reuse, err := adm.Admit(ctx, c.Name, hex.EncodeToString(m.Job.Key[:]), body, m.Job.ID)
		switch {
		case errors.Is(err, ErrCallerBusy):
			r.refused.count(ErrCallerBusy)
			return "", false, ErrCallerBusy
		case errors.Is(err, ErrIdempotencyMismatch):
			return "", false, ErrIdempotencyMismatch
		case err != nil:
			return "", false, fmt.Errorf("admit job: %w", err)
		case reuse != "":
			if err := r.sameTargets(reuse, m, opt.IdempotencyKey); err != nil {
				return "", false, err
			}
			r.sys.HookJob(reuse, "reused")
			return reuse, true, nil
		}
	}
	r.classes.submitting(m.Job.ID, callerClass, r.Live) // before the job can be live
	reply, err := r.sys.Submit(m)
	r.classes.submitted(m.Job.ID, err == nil && reply.ID == m.Job.ID && reply.Refused == nil && reply.Err == nil)
	var mismatch error // a job of the caller's own key reused here, bound to other targets
	if err == nil && reply.Reused {
		mismatch = r.sameTargets(reply.ID, m, opt.IdempotencyKey)
	}
	if adm != nil && (err != nil || reply.ID != m.Job.ID || reply.Refused != nil || reply.Err != nil) {
		adm.Release(c.Name, m.Job.ID) // not created: its admission goes back
		if err == nil && reply.Reused {
			bound := body
			if mismatch != nil {
				bound = "" // the job's own targets are not m's: the grain asks its node
			}
			adm.Reused(c.Name, hex.EncodeToString(m.Job.Key[:]), bound, reply.ID)
		}
	}
	if errors.Is(err, actors.ErrFailed) {
		return "", false, ErrClosed
	}
	if err != nil {
		return "", false, fmt.Errorf("submit: %w", err)
	}
	if reply.Refused != nil {
		r.refused.count(reply.Refused)
		return "", false, reply.Refused
	}
	if reply.Err != nil {
		return "", false, fmt.Errorf("store job: %w", reply.Err)
	}
	if mismatch != nil {
		return "", false, mismatch
	}
	return reply.ID, reply.Reused, nil
}

// CheckIdempotencyKey returns nil if key is a valid
// [SubmitOptions.IdempotencyKey]: 1 to [MaxIdempotencyKey] bytes of UTF-8
// whose every rune is printable (unicode.IsPrint: a space is, a tab or a
// control character is not), neither beginning nor ending with a space
// (HTTP drops a header value's edge spaces, so "k " would arrive as "k");
// else an error wrapping [ErrInvalid] that says why, without the key.
func CheckIdempotencyKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty idempotency key", ErrInvalid)
	case len(key) > MaxIdempotencyKey:
		return fmt.Errorf("%w: idempotency key longer than %d bytes", ErrInvalid, MaxIdempotencyKey)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: idempotency key is not UTF-8", ErrInvalid)
	case key[0] == ' ' || key[len(key)-1] == ' ':
		return fmt.Errorf("%w: idempotency key begins or ends with a space", ErrInvalid)
	}
	for _, c := range key {
		if !unicode.IsPrint(c) {
			return fmt.Errorf("%w: idempotency key has a character that is not printable", ErrInvalid)
		}
	}
	return nil
}

// sameTargets checks, for a submit with an idempotency key that was
// answered with job id reused, that id's stored targets are the submit's
// own: the key is bound to the body it came with. Without a key, the
// derived key is a hash of the targets: nothing to check. The specs are
// read without results. A job that cannot be read here (deleted since;
// in a cluster, another node's) is taken as it is: in a cluster the
// caller's grain checked the hash of its targets before it answered.
func (r *Runner) sameTargets(id string, m *actors.Submit, idemKey string) error {
	if idemKey == "" {
		return nil
	}
	_, stored, err := r.store.TargetStatuses(id)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("check idempotency key: %w", err)
	}
	if len(stored) != len(m.Targets) {
		return ErrIdempotencyMismatch
	}
	for i := range stored {
		if stored[i].URL != m.Targets[i].URL || !bytes.Equal(stored[i].Options, m.Targets[i].Options) {
			return ErrIdempotencyMismatch
		}
	}
	return nil
}

// validUTF8 reports whether t's URL and options are valid UTF-8. Targets are
// stored and keyed by their JSON, which turns every invalid byte into U+FFFD:
// such a target would be stored altered, and keyed like another one.
func validUTF8(t *Target) bool {
	o := &t.Options
	return utf8.ValidString(t.URL) && utf8.ValidString(o.Mode) && utf8.ValidString(o.Question) &&
		utf8.ValidString(o.Pages) && utf8.ValidString(o.Grep) && utf8.ValidString(o.JQ)
}

// idemPrefix follows the caller's name and a 0 byte in the hash of a key
// of the caller's own (SubmitOptions.IdempotencyKey). A derived key hashes
// the name, a 0 byte, then the targets' JSON, which begins with '[': the
// two never hash the same input (a caller name has no 0 byte: keys files
// name callers with printable words).
const idemPrefix = "\x01idempotency-key\x00"

// newSubmit builds the job's rows: a fresh id, the idempotency key (the
// caller's own, idemKey, if not empty; else derived from the targets), the
// target specs.
func (r *Runner) newSubmit(c *Caller, targets []Target, idemKey string) (*actors.Submit, error) {
	all, err := json.Marshal(targets)
	if err != nil {
		return nil, fmt.Errorf("%w: targets: %v", ErrInvalid, err)
	}
	h := sha256.New()
	h.Write([]byte(c.Name))
	h.Write([]byte{0})
	if idemKey != "" {
		h.Write([]byte(idemPrefix))
		h.Write([]byte(idemKey))
	} else {
		h.Write(all)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("job id: %w", err)
	}
	copy(raw[:], r.cfg.NodeTag) // in a cluster, the id names its node
	now := r.cfg.Now().UnixNano()
	m := &actors.Submit{
		Job: persistence.JobRecord{
			ID:           hex.EncodeToString(raw[:]),
			Caller:       c.Name,
			Status:       persistence.StatusQueued,
			TargetsTotal: len(targets),
			Created:      now,
			Lease:        now,
		},
		Targets: make([]persistence.TargetRecord, len(targets)),
		Payload: &submission{caller: c, targets: append([]Target(nil), targets...)},
	}
	h.Sum(m.Job.Key[:0])
	for i := range targets {
		opts, err := json.Marshal(targets[i].Options)
		if err != nil {
			return nil, fmt.Errorf("%w: target %d options: %v", ErrInvalid, i, err)
		}
		m.Targets[i] = persistence.TargetRecord{Idx: i, URL: targets[i].URL, Options: opts, Status: persistence.TargetPending}
	}
	return m, nil
}

// Cancel cancels a live job: it is stored cancelled before Cancel returns; a
// target in flight finishes and is stored, no further target starts, and
// later targets stay pending. It returns false for an unknown id, a job
// that has already ended, and after [Runner.Close].
func (r *Runner) Cancel(id string) bool {
	ok, _ := r.TryCancel(id)
	return ok
}

// TryCancel is [Runner.Cancel] with the reason a cancel was not made:
// false and nil for an unknown id, a job that has already ended, and after
// [Runner.Close]; false and an error when the cancel could not be stored,
// and nothing changed (the job goes on as it was; try again later). Only a
// runner with [DurabilitySync] refuses a cancel so: it acknowledges one
// only once it is synced, and answers at once, never waiting for room,
// with an error wrapping [ErrDiskFull] while the store's disk has no room
// for a write (below [Config.DiskReserve] a cancel is still written, into
// the reserve), or [ErrUnavailable] while it fails (ErrUnavailable is
// also the answer when the runner did not answer in time: then the
// cancel may still be made). Without it a cancel is
// made at once and its write, if the disk refuses it, is held and written
// once there is room (a crash before then leaves the job failed
// "restart"). Safe for concurrent use.
func (r *Runner) TryCancel(id string) (bool, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return false, nil
	}
	ok, err := r.sys.Cancel(id)
	switch {
	case err == nil:
		return ok, nil
	case errors.Is(err, ErrDiskFull):
		return false, fmt.Errorf("cancel: %w: the cancel was not stored", ErrDiskFull)
	case errors.Is(err, actors.ErrFailed):
		return false, nil
	}
	// A disk that fails, or no answer in time (the cancel waited for its
	// job's write): it may not have been made.
	return false, fmt.Errorf("cancel: %w: %w", ErrUnavailable, err)
}

// CloseTimeout bounds how long [Runner.Close] waits for the fetches in
// flight to return once their context is cancelled, and then for the
// hooks to run.
const CloseTimeout = 30 * time.Second

// Close is [Runner.Shutdown] bounded by [CloseTimeout]: it stops the runner,
// and gives up on a fetch that has not returned 30 s after its context was
// cancelled, or on a hook that blocks. It is idempotent. A runner made by
// [Open] closes its store too. A hook may call it: see [Runner.Shutdown].
func (r *Runner) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	_ = r.Shutdown(ctx)
}

// Shutdown stops the runner: it stops taking work, cancels the context of
// the fetches in flight, waits for them to return (until ctx is done) and
// stores their outcomes, sets every job still queued or running failed
// with the error "shutdown", and stops every actor and goroutine the runner
// started; once it returns every hook has run. It is idempotent; a second
// call returns nil once the first has finished. The store stays open: the
// caller closes it; except for a runner made by [Open], whose store
// Shutdown closes last (an error closing it is returned if nothing else
// is).
//
// If ctx is done before a fetch has returned, Shutdown gives up on it: its
// target stays pending, its job is failed "shutdown", its goroutine is left
// to end on its own and its late outcome is dropped (and logged), never
// written; Shutdown then returns ctx.Err(). The same goes for a hook that
// has not returned when ctx is done: Shutdown returns ctx.Err() without
// it, its goroutine is left to it, and the hooks queued after it run once
// it returns, after Shutdown has.
//
// A hook (of this runner or of another in the process) may call Shutdown
// or Close: the runner stops as above, except that Shutdown does not wait
// for the hooks, which would wait for itself: the hook calling it, and the
// hooks queued after it, run after it returns. Called from a hook while
// another Shutdown is under way, it returns nil at once (that one waits
// for the hook).
func (r *Runner) Shutdown(ctx context.Context) error {
	if !r.shutting.CompareAndSwap(false, true) {
		if !actors.InHook() {
			<-r.shutDone
		}
		return nil
	}
	defer close(r.shutDone)
	return r.shutdown(ctx)
}

// shutdown is Shutdown's first call.
func (r *Runner) shutdown(ctx context.Context) (err error) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	giveUp := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(giveUp) })
	defer stop()
	r.stopReaping()
	n, gaveUp, serr := r.sys.Stop(r.cancel, giveUp)
	if serr != nil {
		r.log.Warn("close runner", slog.String(keyErr, serr.Error()))
	}
	if gaveUp {
		err = ctx.Err()
	}
	if r.sys.Failed() {
		<-r.failDone
	} else {
		close(r.done)
	}
	if n > 0 || gaveUp {
		// The live jobs a stop ends read failed "shutdown" (README,
		// Restarts): said with how many. A stop that ended none says only
		// that it closed.
		r.log.Info("runner closed; live jobs failed \"shutdown\"", slog.Int(keyCount, n), slog.Bool("gave_up", gaveUp))
	} else {
		r.log.Info("runner closed")
	}
	if r.ownsStore {
		r.waitMu.Lock()
		for id, w := range r.waits {
			w.job, _ = r.Job(id)
		}
		r.storeGone = true
		r.waitMu.Unlock()
		if cerr := r.store.Close(); cerr != nil {
			r.log.Warn("close store", slog.String(keyErr, storeErrText(cerr)))
			if err == nil {
				err = cerr
			}
		}
	}
	return err
}

// failClosed is called once when the runner's own code has failed past
// what supervision contains: the supervisor is being stopped with every
// job actor. The runner stops taking work and fails every live job
// "internal error" in the store; readers then read the store.
func (r *Runner) failClosed() {
	r.mu.Lock()
	r.closed, r.failed = true, true
	r.mu.Unlock()
	r.cancel()
	r.sys.Abort() // a worker waiting for a fetch that ignores its context stops
	r.sys.WaitSupervisorStopped()
	r.unreaped.mu.Lock() // not beside reapLoop's (reaplater.go)
	n, err := r.reap(reapInternal)
	r.unreaped.mu.Unlock()
	if err != nil {
		r.log.Error("fail live jobs after the runner failed", slog.String(keyErr, storeErrText(err)))
	}
	r.views.EndAll()
	r.log.Error("runner failed closed: it takes no more work; its live jobs failed", slog.Int(keyCount, n))
	close(r.failDone)
	close(r.done)
}

// Err reports whether the runner is serving: nil while it runs,
// [ErrClosed] once it has been closed, and an error wrapping [ErrFailed]
// and [ErrClosed] once its own code failed and it closed itself. A health
// check answers unhealthy for any non-nil Err.
func (r *Runner) Err() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch {
	case r.failed:
		return fmt.Errorf("%w: %w", ErrFailed, ErrClosed)
	case r.closed:
		return ErrClosed
	}
	return nil
}

// HookPanics returns how many hook calls have panicked (or ended their
// goroutine) since [New]. Each such call is logged at Error with the hook's
// name and skipped; the runner goes on.
func (r *Runner) HookPanics() uint64 { return r.sys.HookPanics() }

// DiskState is the free space of a store's file system as last measured:
// see [Runner.Disk].
type DiskState = persistence.DiskState

// Disk returns the free space of the store's file system as last measured
// (every second, see [Config.DiskReserve]); Full while it is below the
// reserve. A store in memory has no disk: the zero DiskState. Safe for
// concurrent use.
func (r *Runner) Disk() DiskState { return r.store.Disk() }
