package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sift/batch/actors"
	"github.com/sift/batch/persistence"
)

// Runner runs batch jobs: it stores each job, fetches its targets one at a
// time, fairly across jobs, with [Config.Workers] workers, and stores every
// result as it lands. Create one with [New]; stop it with [Runner.Close].
// All methods are safe for concurrent use.
type Runner struct {
	store  *persistence.Store
	fetch  FetchFunc
	cfg    Config
	log    *slog.Logger
	sys    *actors.System
	cancel context.CancelFunc // cancels the fetches' context

	mu     sync.RWMutex // closed is set under mu held for writing
	closed bool
	once   sync.Once
}

// submission is what a job's actor holds for the FetchFunc: the caller and
// the targets, in memory only.
type submission struct {
	caller  *Caller
	targets []Target
}

// New starts a runner on store. A nil store or fetch, or a negative [Config]
// field, is an error; zero fields take their defaults; a nil log logs
// nothing. Badger's own log lines go to log too, quietly.
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
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	store.SetLogger(log)
	r := &Runner{store: store, fetch: fetch, cfg: cfg, log: log}
	if err := r.reap(); err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.sys, err = actors.Start(&actors.Config{
		Store:         store,
		Fetch:         r.fetchOne,
		FetchContext:  ctx,
		TTL:           cfg.TTL,
		TargetsPerJob: cfg.TargetsPerJob,
		JobsPerCaller: cfg.JobsPerCaller,
		JobsTotal:     cfg.JobsTotal,
		Workers:       cfg.Workers,
		MaxBytes:      cfg.MaxBytes,
		RetryWait:     cfg.RetryWait,
		RetryFor:      cfg.RetryFor,
		Hooks:         actors.Hooks(cfg.Hooks),
		Now:           cfg.Now,
		Log:           log,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("new runner: %w", err)
	}
	return r, nil
}

// reap fails the jobs a crashed process left live, and settles the ones it
// left cancelled with a target in flight.
func (r *Runner) reap() error {
	left, err := r.store.Unsettled()
	if err != nil {
		return fmt.Errorf("reap: %w", err)
	}
	failed := 0
	for i := range left {
		j := &left[i]
		if persistence.IsLive(j.Status) {
			j.Status, j.Error = persistence.StatusFailed, "restart"
			failed++
		}
		j.Settled = true
		if err := r.store.SaveJob(j); err != nil {
			return fmt.Errorf("reap: %w", err)
		}
	}
	if len(left) > 0 {
		r.log.Info("failed the jobs a previous run left live", slog.Int("count", failed), slog.Int("settled", len(left)))
	}
	return nil
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
// Submit returns.
//
// ctx is checked before the job is submitted; a done ctx returns its error.
func (r *Runner) Submit(ctx context.Context, c *Caller, callerClass string, targets []Target) (id string, reused bool, err error) {
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
	m, err := r.newSubmit(c, targets)
	if err != nil {
		return "", false, err
	}
	reply, err := r.sys.Submit(m)
	if err != nil {
		return "", false, fmt.Errorf("submit: %w", err)
	}
	switch reply.Refused {
	case actors.RefusedTooManyTargets:
		return "", false, ErrTooManyTargets
	case actors.RefusedCallerBusy:
		return "", false, ErrCallerBusy
	case actors.RefusedBusy:
		return "", false, ErrBusy
	case actors.RefusedClosed:
		return "", false, ErrClosed
	}
	if reply.Err != nil {
		return "", false, fmt.Errorf("store job: %w", reply.Err)
	}
	return reply.ID, reply.Reused, nil
}

// validUTF8 reports whether t's URL and options are valid UTF-8. Targets are
// stored and keyed by their JSON, which turns every invalid byte into U+FFFD:
// such a target would be stored altered, and keyed like another one.
func validUTF8(t *Target) bool {
	o := &t.Options
	return utf8.ValidString(t.URL) && utf8.ValidString(o.Mode) && utf8.ValidString(o.Question) &&
		utf8.ValidString(o.Pages) && utf8.ValidString(o.Grep) && utf8.ValidString(o.JQ)
}

// newSubmit builds the job's rows: a fresh id, the idempotency key, the
// target specs.
func (r *Runner) newSubmit(c *Caller, targets []Target) (*actors.Submit, error) {
	all, err := json.Marshal(targets)
	if err != nil {
		return nil, fmt.Errorf("%w: targets: %v", ErrInvalid, err)
	}
	h := sha256.New()
	h.Write([]byte(c.Name))
	h.Write([]byte{0})
	h.Write(all)
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("job id: %w", err)
	}
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

// fetchOne runs the FetchFunc for one target and classifies its outcome.
// A panic is not recovered here: it crashes the worker actor, and the
// supervision strategy stores the target failed.
func (r *Runner) fetchOne(ctx context.Context, payload any, idx int) actors.Outcome {
	s := payload.(*submission)
	res, err := r.fetch(ctx, s.caller, s.targets[idx])
	if err != nil {
		if errors.Is(err, ErrRetryLater) {
			return actors.Outcome{Err: err, Msg: err.Error(), Busy: true}
		}
		var te *TargetError
		if errors.As(err, &te) && te != nil {
			return actors.Outcome{Err: err, Msg: te.Msg, Hint: te.Hint}
		}
		return actors.Outcome{Err: err, Msg: err.Error()}
	}
	b, err := json.Marshal(res)
	if err != nil {
		err = errors.New("result cannot be encoded as JSON")
		return actors.Outcome{Err: err, Msg: err.Error()}
	}
	return actors.Outcome{Result: b}
}

// Cancel cancels a live job: it is stored cancelled before Cancel returns; a
// target in flight finishes and is stored, no further target starts, and
// later targets stay pending. It returns false for an unknown id, a job
// that has already ended, and after [Runner.Close].
func (r *Runner) Cancel(id string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return false
	}
	return r.sys.Cancel(id)
}

// Status returns a job and its targets, with each stored result decoded; a
// target being fetched reads running. It returns false for an unknown id and
// for a job past its lease + [Config.TTL]. Status never writes.
func (r *Runner) Status(id string) (Job, []TargetStatus, bool) {
	r.mu.RLock()
	closed := r.closed
	var reply *actors.StatusReply
	var err error
	if !closed {
		reply, err = r.sys.Status(id)
	}
	r.mu.RUnlock()
	switch {
	case err != nil:
		r.log.Warn("status", slog.String("job_id", id), slog.String("err", err.Error()))
		return Job{}, nil, false
	case reply != nil && reply.Live:
		if reply.Err != nil {
			r.log.Warn("status", slog.String("job_id", id), slog.String("err", "read failed"))
			return Job{}, nil, false
		}
		return toJob(&reply.Job), toTargets(reply.Targets), true
	}
	j, ts, err := r.store.JobWithTargets(id)
	if err != nil {
		if !errors.Is(err, persistence.ErrNotFound) {
			r.log.Warn("status", slog.String("job_id", id), slog.String("err", "read failed"))
		}
		return Job{}, nil, false
	}
	if j.Settled && j.Lease+int64(r.cfg.TTL) <= r.cfg.Now().UnixNano() {
		return Job{}, nil, false // expired, not yet swept
	}
	return toJob(&j), toTargets(ts), true
}

func toJob(j *persistence.JobRecord) Job {
	return Job{
		ID:            j.ID,
		Caller:        j.Caller,
		Status:        j.Status,
		Error:         j.Error,
		TargetsTotal:  j.TargetsTotal,
		TargetsDone:   j.TargetsDone,
		TargetsFailed: j.TargetsFailed,
		CreatedAt:     j.Created / 1e9,
	}
}

func toTargets(ts []persistence.TargetRecord) []TargetStatus {
	out := make([]TargetStatus, len(ts))
	for i := range ts {
		t := &ts[i]
		out[i] = TargetStatus{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error, Hint: t.Hint}
		if t.Status == persistence.TargetDone && t.Result != nil {
			var res Result
			if json.Unmarshal(t.Result, &res) == nil {
				out[i].Result = &res
			}
		}
	}
	return out
}

// Touch moves a job's lease to now, so that it stays readable for another
// [Config.TTL]. An unknown id is ignored.
func (r *Runner) Touch(id string) {
	now := r.cfg.Now().UnixNano()
	r.mu.RLock()
	owned := !r.closed && r.sys.Touch(id, now) // a live job's row is its actor's
	r.mu.RUnlock()
	if owned {
		return
	}
	if _, err := r.store.Touch(id, now); err != nil {
		r.log.Warn("touch", slog.String("job_id", id), slog.String("err", "write failed"))
	}
}

// Close stops the runner: it stops taking work, cancels the context of the
// fetches in flight, waits for them to return and stores their outcomes,
// sets every job still queued or running failed with the error "shutdown",
// and stops every actor and goroutine the runner started. It is idempotent.
// The store stays open: the caller closes it.
func (r *Runner) Close() {
	r.once.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		n, err := r.sys.Stop(r.cancel) // stops dispatching, then cancels
		if err != nil {
			r.log.Warn("close runner", slog.String("err", err.Error()))
		}
		r.log.Info("runner closed", slog.Int("count", n))
	})
}

// Job returns a job's summary; false for an unknown id and for a job past
// its lease + [Config.TTL]. It never writes.
func (r *Runner) Job(id string) (Job, bool) {
	j, _, ok := r.Status(id)
	return j, ok
}

// Targets returns a job's summary and every target's status, error and
// hint, from one consistent view, without results (Result is nil); false as
// for [Runner.Job].
func (r *Runner) Targets(id string) (Job, []TargetStatus, bool) {
	j, ts, ok := r.Status(id)
	for i := range ts {
		ts[i].Result = nil
	}
	return j, ts, ok
}

// Result returns target idx's result, decoded; false unless that target is
// stored done.
func (r *Runner) Result(id string, idx int) (*Result, bool) {
	_, ts, ok := r.Status(id)
	if !ok || idx < 0 || idx >= len(ts) || ts[idx].Result == nil {
		return nil, false
	}
	return ts[idx].Result, true
}

// ResultJSON returns target idx's result as its stored JSON; false as for
// [Runner.Result]. The bytes are the caller's.
func (r *Runner) ResultJSON(id string, idx int) ([]byte, bool) {
	res, ok := r.Result(id, idx)
	if !ok {
		return nil, false
	}
	b, err := json.Marshal(res)
	return b, err == nil
}

// Wait blocks until the job id is terminal and returns it. It returns
// [ErrNotFound] for an unknown or expired id, [ErrClosed] with the job as
// it was left once the runner has closed, and ctx.Err() when ctx is done.
func (r *Runner) Wait(ctx context.Context, id string) (Job, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		j, ok := r.Job(id)
		switch {
		case !ok:
			return Job{}, ErrNotFound
		case !IsLive(j.Status):
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-t.C:
		}
	}
}

// Shutdown is [Runner.Close] bounded by ctx.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.Close()
	return ctx.Err()
}

// Err reports whether the runner is serving: nil while it runs,
// [ErrClosed] once it has been closed, and an error wrapping [ErrFailed]
// (and [ErrClosed]) once its own code failed and it closed itself. A health
// check answers unhealthy for any non-nil Err.
func (r *Runner) Err() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return ErrClosed
	}
	return nil
}

// HookPanics returns how many hook calls have panicked since [New]. Each
// such call is logged at Error and skipped; the runner goes on.
func (r *Runner) HookPanics() uint64 { return 0 }
