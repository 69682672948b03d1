package engine

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sift/batch/persistence"
)

// Runner runs batch jobs. Work in progress: being implemented.
type Runner struct{}

// New starts a runner.
func New(store *persistence.Store, fetch FetchFunc, cfg Config, log *slog.Logger) (*Runner, error) {
	return nil, errors.New("not implemented yet")
}

// Submit submits a job.
func (r *Runner) Submit(ctx context.Context, c *Caller, callerClass string, targets []Target) (id string, reused bool, err error) {
	return "", false, ErrClosed
}

// Cancel cancels a job.
func (r *Runner) Cancel(id string) bool { return false }

// Status reports a job.
func (r *Runner) Status(id string) (Job, []TargetStatus, bool) { return Job{}, nil, false }

// Touch bumps a job's lease.
func (r *Runner) Touch(id string) {}

// Close stops the runner.
func (r *Runner) Close() {}
