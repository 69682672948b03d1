package batchtype_test

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/sift/batch/engine/batchtype"
)

func TestStatus_LiveOrTerminal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status         string
		live, terminal bool
	}{
		{batchtype.StatusQueued, true, false},
		{batchtype.StatusRunning, true, false},
		{batchtype.StatusDone, false, true},
		{batchtype.StatusPartial, false, true},
		{batchtype.StatusFailed, false, true},
		{batchtype.StatusCancelled, false, true},
		{"", false, false},
		{"pending", false, false},
		{"Done", false, false},
	}
	for _, tt := range tests {
		if got := batchtype.IsLive(tt.status); got != tt.live {
			t.Errorf("IsLive(%q) = %v, want %v", tt.status, got, tt.live)
		}
		if got := batchtype.IsTerminal(tt.status); got != tt.terminal {
			t.Errorf("IsTerminal(%q) = %v, want %v", tt.status, got, tt.terminal)
		}
	}
}

func TestStatus_ListsEveryWordOnce(t *testing.T) {
	t.Parallel()
	jobs := batchtype.JobStatuses()
	want := []string{"queued", "running", "done", "partial", "failed", "cancelled"}
	if !slices.Equal(jobs, want) {
		t.Fatalf("JobStatuses() = %q, want %q", jobs, want)
	}
	for _, s := range jobs {
		if batchtype.IsLive(s) == batchtype.IsTerminal(s) {
			t.Errorf("status %q: live %v, terminal %v; want exactly one", s, batchtype.IsLive(s), batchtype.IsTerminal(s))
		}
	}
	jobs[0] = "changed"
	if batchtype.JobStatuses()[0] != batchtype.StatusQueued {
		t.Error("JobStatuses shares its slice with callers")
	}
	targets := batchtype.TargetStates()
	if want := []string{"pending", "running", "done", "failed"}; !slices.Equal(targets, want) {
		t.Fatalf("TargetStates() = %q, want %q", targets, want)
	}
}

func TestStatus_TerminalStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		total, stored, failed int
		want                  string
	}{
		{3, 0, 0, ""},
		{3, 2, 2, ""},
		{3, 3, 0, batchtype.StatusDone},
		{3, 3, 1, batchtype.StatusPartial},
		{3, 3, 2, batchtype.StatusPartial},
		{3, 3, 3, batchtype.StatusFailed},
		{1, 1, 0, batchtype.StatusDone},
		{1, 1, 1, batchtype.StatusFailed},
	}
	for _, tt := range tests {
		if got := batchtype.TerminalStatus(tt.total, tt.stored, tt.failed); got != tt.want {
			t.Errorf("TerminalStatus(%d, %d, %d) = %q, want %q", tt.total, tt.stored, tt.failed, got, tt.want)
		}
	}
}

func TestStatus_HasOutcome(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		batchtype.TargetPending: false,
		batchtype.TargetRunning: false,
		batchtype.TargetDone:    true,
		batchtype.TargetFailed:  true,
		"":                      false,
		"cancelled":             false,
	}
	for state, want := range tests {
		if got := batchtype.HasOutcome(state); got != want {
			t.Errorf("HasOutcome(%q) = %v, want %v", state, got, want)
		}
	}
}

func TestStatus_NotRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		job                 string
		total, stored, want int
		pendingWillNotRun   bool
	}{
		{batchtype.StatusQueued, 3, 0, 0, false},
		{batchtype.StatusRunning, 3, 1, 0, false},
		{batchtype.StatusDone, 3, 3, 0, true},
		{batchtype.StatusPartial, 3, 3, 0, true},
		{batchtype.StatusFailed, 3, 3, 0, true},
		{batchtype.StatusFailed, 3, 1, 2, true}, // a restart or a shutdown
		{batchtype.StatusCancelled, 3, 0, 3, true},
		{batchtype.StatusCancelled, 3, 2, 1, true},
		{batchtype.StatusCancelled, 3, 3, 0, true},
		{"", 3, 0, 0, false},
	}
	for _, tt := range tests {
		if got := batchtype.NotRun(tt.job, tt.total, tt.stored); got != tt.want {
			t.Errorf("NotRun(%q, %d, %d) = %d, want %d", tt.job, tt.total, tt.stored, got, tt.want)
		}
		if got := batchtype.WillNotRun(tt.job, batchtype.TargetPending); got != tt.pendingWillNotRun {
			t.Errorf("WillNotRun(%q, pending) = %v, want %v", tt.job, got, tt.pendingWillNotRun)
		}
		for _, s := range []string{batchtype.TargetRunning, batchtype.TargetDone, batchtype.TargetFailed} {
			if batchtype.WillNotRun(tt.job, s) {
				t.Errorf("WillNotRun(%q, %q) = true, want false: it ran, or runs", tt.job, s)
			}
		}
	}
}

func TestStatus_TargetHint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		job, jobErr, state, e, hint string
		want                        string // "" none; else a part of the hint
	}{
		{"a stored hint is kept", batchtype.StatusPartial, "", batchtype.TargetFailed, "HTTP 404", "check the URL", "check the URL"},
		{"a stored hint is kept, pending too", batchtype.StatusCancelled, "", batchtype.TargetPending, "", "own", "own"},
		{"pending, live job", batchtype.StatusRunning, "", batchtype.TargetPending, "", "", ""},
		{"pending, queued job", batchtype.StatusQueued, "", batchtype.TargetPending, "", "", ""},
		{"running, cancelled job", batchtype.StatusCancelled, "", batchtype.TargetRunning, "", "", ""},
		{"done", batchtype.StatusCancelled, "", batchtype.TargetDone, "", "", ""},
		{"pending, cancelled", batchtype.StatusCancelled, "", batchtype.TargetPending, "", "", "not run: the job was cancelled"},
		{"pending, restart", batchtype.StatusFailed, "restart", batchtype.TargetPending, "", "", "not run: the server restarted (it had stopped without a clean shutdown) before this target was stored"},
		{"pending, shutdown", batchtype.StatusFailed, "shutdown", batchtype.TargetPending, "", "", "not run: the server shut down"},
		{"pending, runner failed", batchtype.StatusFailed, "internal error", batchtype.TargetPending, "", "", "not run: the runner stopped on an internal error"},
		{"pending, another error", batchtype.StatusFailed, "disk full", batchtype.TargetPending, "", "", "not run: the job ended (disk full)"},
		{"pending, no error", batchtype.StatusFailed, "", batchtype.TargetPending, "", "", "not run: the job ended before"},
		{"failed by the cancel", batchtype.StatusCancelled, "", batchtype.TargetFailed, "interrupted: context canceled", "", "the job was cancelled while this target was fetched"},
		{"failed, cancelled, own words", batchtype.StatusCancelled, "", batchtype.TargetFailed, "cancelled", "", "the job was cancelled while"},
		{"failed busy", batchtype.StatusFailed, "", batchtype.TargetFailed, "retry later: 429", "", "kept answering busy"},
		{"failed panic", batchtype.StatusPartial, "", batchtype.TargetFailed, "internal error", "", "a bug in the server"},
		{"failed at a shutdown", batchtype.StatusFailed, "shutdown", batchtype.TargetFailed, "shutdown", "", "the server stopped while"},
		{"failed at a stop", batchtype.StatusFailed, "", batchtype.TargetFailed, "fetch stopped: x", "", "the server stopped while"},
		{"failed, other", batchtype.StatusFailed, "", batchtype.TargetFailed, "boom", "", "the fetch failed; check the URL"},
	}
	for _, tt := range tests {
		// TargetHint is the stored hint, else NotRunHint, else FailureHint.
		notRun, failure := batchtype.NotRunHint(tt.job, tt.jobErr, tt.state), batchtype.FailureHint(tt.job, tt.state, tt.e)
		if notRun != "" && failure != "" {
			t.Errorf("%s: both a not-run hint %q and a failure hint %q", tt.name, notRun, failure)
		}
		if want := cmp.Or(tt.hint, notRun, failure); batchtype.TargetHint(tt.job, tt.jobErr, tt.state, tt.e, tt.hint) != want {
			t.Errorf("%s: TargetHint is not the stored hint, else NotRunHint, else FailureHint", tt.name)
		}
		got := batchtype.TargetHint(tt.job, tt.jobErr, tt.state, tt.e, tt.hint)
		switch {
		case tt.want == "" && got != "":
			t.Errorf("%s: TargetHint = %q, want none", tt.name, got)
		case tt.want != "" && !strings.Contains(got, tt.want):
			t.Errorf("%s: TargetHint = %q, want it to hold %q", tt.name, got, tt.want)
		case strings.HasPrefix(tt.want, "not run") && !strings.HasSuffix(got, "submit it in a new job to fetch it"):
			t.Errorf("%s: TargetHint = %q, want it to say what to do", tt.name, got)
		}
	}
}
