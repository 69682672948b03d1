package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

var errDiskStillFailing = errors.New("disk still failing")

// TestAPI_StoreDownReadsAnswer503: a store held down after a failed sync
// (its reopen fails: persistence.SetOpenFault) cannot read, and a read of
// a job it holds is then 503 with Retry-After naming the disk error, never
// 404 "job not found"; the runner says so too (Lookup, Wait:
// engine.ErrUnavailable). Once the disk works again the store opens by
// itself and the same reads answer the job and its result.
func TestAPI_StoreDownReadsAnswer503(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault error
		msg   string
	}{
		{"disk error", errDiskStillFailing, "store unavailable: disk error"},
		{"disk full", syscall.ENOSPC, "store unavailable: disk full"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			storeDownReads(t, c.fault, c.msg)
		})
	}
}

// storeDownReads is TestAPI_StoreDownReadsAnswer503 with a reopen that
// fails with fault, and the 503's error msg.
func storeDownReads(t *testing.T, fault error, msg string) {
	store := enginetest.OpenStore(t, t.TempDir())
	b := setupOn(t, store, engine.Config{Durability: engine.DurabilitySync}, nil, httpapi.Options{})
	id := b.submit(t, "alice-key", "https://example.com/a")
	require := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Fatalf(format, args...)
		}
	}
	j := b.waitTerminal(t, id)
	require(j.Status == "done", "job %s: %s", id, j.Status)

	// Hold the store down: the next sync fails, and every reopen too.
	store.SetOpenFault(func() error { return fault })
	store.SetSyncFault(func() error { return errDiskStillFailing })
	sub := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(targetsBody("https://example.com/b")))
	require(sub.code != http.StatusAccepted, "a submit whose sync failed answered 202: %s", sub.body)
	store.SetSyncFault(nil)
	// The next write reopens Badger (fsyncgate), which fails: down.
	sub = b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(targetsBody("https://example.com/c")))
	require(sub.code != http.StatusAccepted, "a submit with the store down answered 202: %s", sub.body)
	t.Logf("submits while the disk fails: %d %s", sub.code, sub.body)

	for _, path := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "/0", "/v1/batch/" + id + "?results=1"} {
		got := b.do(t, http.MethodGet, path, "alice-key", nil)
		require(got.code == http.StatusServiceUnavailable, "GET %s with the store down: %d, want 503: %s", path, got.code, got.body)
		require(got.header.Get("Retry-After") != "", "GET %s: 503 without Retry-After", path)
		m := got.json(t)
		require(m["error"] == msg, "GET %s: error %q", path, m["error"])
	}
	_, err := b.Runner.Lookup(id)
	require(errors.Is(err, engine.ErrUnavailable) && !errors.Is(err, engine.ErrNotFound), "Lookup with the store down: %v", err)
	require(errors.Is(err, engine.ErrDiskFull) == (fault == syscall.ENOSPC), "Lookup with the store down: %v", err)
	_, err = b.Runner.Wait(context.Background(), id)
	require(errors.Is(err, engine.ErrUnavailable), "Wait with the store down: %v", err)

	// The disk works again: a read opens the store, and the job is there.
	store.SetOpenFault(nil)
	testkit.WaitFor(t, "the store to open again", func() bool {
		_, err := b.Runner.Lookup(id)
		return err == nil
	})
	got := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil)
	require(got.code == http.StatusOK, "GET result after the store opened: %d: %s", got.code, got.body)
	missing := b.do(t, http.MethodGet, "/v1/batch/00000000000000000000000000", "alice-key", nil)
	require(missing.code == http.StatusNotFound, "an unknown id with the store open: %d", missing.code)
}
