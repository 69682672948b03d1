package batchtype_test

import (
	"slices"
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
