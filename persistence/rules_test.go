package persistence_test

import (
	"testing"
	"time"

	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

func TestJobRecord_TerminalStatus(t *testing.T) {
	for _, tc := range []struct {
		name                string
		total, done, failed int
		want                string
	}{
		{"nothing stored", 3, 0, 0, ""},
		{"one to go", 3, 2, 1, ""},
		{"all done", 3, 3, 0, persistence.StatusDone},
		{"all failed", 3, 3, 3, persistence.StatusFailed},
		{"a mix", 3, 3, 1, persistence.StatusPartial},
		{"one target, done", 1, 1, 0, persistence.StatusDone},
		{"one target, failed", 1, 1, 1, persistence.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := persistence.JobRecord{TargetsTotal: tc.total, TargetsDone: tc.done, TargetsFailed: tc.failed}
			require.Equal(t, tc.want, j.TerminalStatus())
		})
	}
}

func TestJobRecord_CountOutcome(t *testing.T) {
	start := persistence.JobRecord{TargetsTotal: 4, TargetsDone: 1, TargetsFailed: 1, ResultBytes: 10, Lease: 100}
	for _, tc := range []struct {
		name         string
		status       string
		size, stored int64
		done, failed int
		bytes, lease int64
	}{
		{"done, later", persistence.TargetDone, 5, 200, 2, 1, 15, 200},
		{"done, earlier: the lease stays", persistence.TargetDone, 5, 50, 2, 1, 15, 100},
		{"failed", persistence.TargetFailed, 0, 150, 2, 2, 10, 150},
		{"pending counts nothing", persistence.TargetPending, 5, 300, 1, 1, 10, 100},
		{"running counts nothing", persistence.TargetRunning, 5, 300, 1, 1, 10, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := start
			j.CountOutcome(tc.status, tc.size, tc.stored)
			require.Equal(t, tc.done, j.TargetsDone)
			require.Equal(t, tc.failed, j.TargetsFailed)
			require.Equal(t, tc.bytes, j.ResultBytes)
			require.Equal(t, tc.lease, j.Lease)
		})
	}
}

func TestJobRecord_UncountResult(t *testing.T) {
	for _, tc := range []struct {
		name                string
		status              string
		total, done, failed int
		want                string
	}{
		{"partial, the last success lost: failed", persistence.StatusPartial, 2, 2, 1, persistence.StatusFailed},
		{"done becomes partial", persistence.StatusDone, 2, 2, 0, persistence.StatusPartial},
		{"a live job stays live", persistence.StatusRunning, 3, 1, 0, persistence.StatusRunning},
		{"cancelled stays cancelled", persistence.StatusCancelled, 3, 1, 0, persistence.StatusCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := persistence.JobRecord{Status: tc.status, TargetsTotal: tc.total, TargetsDone: tc.done, TargetsFailed: tc.failed, ResultBytes: 5}
			j.UncountResult(5)
			require.Equal(t, tc.want, j.Status)
			require.Equal(t, tc.failed+1, j.TargetsFailed)
			require.Equal(t, tc.done, j.TargetsDone, "still stored")
			require.Zero(t, j.ResultBytes)
		})
	}
}

func TestJobRecord_Expired(t *testing.T) {
	const ttl = time.Hour
	lease := int64(1000)
	for _, tc := range []struct {
		name string
		now  int64
		want bool
	}{
		{"within the TTL", lease + int64(ttl) - 1, false},
		{"at lease + TTL: gone", lease + int64(ttl), true},
		{"past it", lease + int64(ttl) + 1, true},
		{"before the lease", lease - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := persistence.JobRecord{Lease: lease}
			require.Equal(t, tc.want, j.Expired(ttl, tc.now))
			require.Equal(t, tc.want, persistence.Expired(lease, ttl, tc.now))
		})
	}
}

func TestJobRecord_Reusable(t *testing.T) {
	const ttl = time.Hour
	lease := int64(1000)
	fresh, gone := lease+int64(ttl)-1, lease+int64(ttl)
	for _, tc := range []struct {
		status string
		now    int64
		want   bool
	}{
		{persistence.StatusQueued, fresh, true},
		{persistence.StatusRunning, fresh, true},
		{persistence.StatusDone, fresh, true},
		{persistence.StatusPartial, fresh, true},
		{persistence.StatusFailed, fresh, false},
		{persistence.StatusCancelled, fresh, false},
		{"", fresh, false},
		{persistence.StatusDone, gone, false},
		{persistence.StatusRunning, gone, false},
	} {
		t.Run(tc.status, func(t *testing.T) {
			j := persistence.JobRecord{Status: tc.status, Lease: lease}
			require.Equal(t, tc.want, j.Reusable(ttl, tc.now))
		})
	}
}

func TestIsLive(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   bool
	}{
		{persistence.StatusQueued, true},
		{persistence.StatusRunning, true},
		{persistence.StatusDone, false},
		{persistence.StatusPartial, false},
		{persistence.StatusFailed, false},
		{persistence.StatusCancelled, false},
	} {
		require.Equal(t, tc.want, persistence.IsLive(tc.status), tc.status)
	}
}

func TestJobRecord_Recount(t *testing.T) {
	done := persistence.TargetRecord{Status: persistence.TargetDone, ResultSize: 3, Stored: 50}
	failed := persistence.TargetRecord{Status: persistence.TargetFailed, Stored: 70}
	pending := persistence.TargetRecord{Status: persistence.TargetPending}
	running := persistence.TargetRecord{Status: persistence.TargetRunning}
	for _, tc := range []struct {
		name         string
		ts           []persistence.TargetRecord
		done, failed int
		bytes, lease int64
	}{
		{"none stored", []persistence.TargetRecord{pending, running}, 0, 0, 0, 10},
		{"one of each", []persistence.TargetRecord{done, failed, running, pending}, 2, 1, 3, 70},
		{"all done", []persistence.TargetRecord{done, done}, 2, 0, 6, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := persistence.JobRecord{TargetsTotal: len(tc.ts), TargetsDone: 9, TargetsFailed: 9, ResultBytes: 99, Lease: 10}
			j.Recount(tc.ts)
			require.Equal(t, tc.done, j.TargetsDone)
			require.Equal(t, tc.failed, j.TargetsFailed)
			require.Equal(t, tc.bytes, j.ResultBytes)
			require.Equal(t, tc.lease, j.Lease)
		})
	}
}
