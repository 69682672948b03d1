package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

var errDiskStillFailing = errors.New("disk still failing")

// TestDashboard_StoreDownJobPage503: with the store held down after a
// failed sync (its reopen fails: persistence.SetOpenFault), a job's page
// and its result's page answer 503 with Retry-After naming the disk
// error, never "Job not found"; once the disk works the store opens by
// itself and the page shows the job.
func TestDashboard_StoreDownJobPage503(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	b := setupOn(t, store, dashboard.Options{})
	if err := store.SetDurable(true); err != nil {
		t.Fatal(err)
	}
	id := b.Submit(t, "alice", []engine.Target{{URL: "https://example.com/a"}})
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	if j, err := b.Runner.Wait(ctx, id); err != nil || j.Status != "done" {
		t.Fatalf("job %s: %s, %v", id, j.Status, err)
	}
	br := b.signIn(t, "alice-key")

	store.SetOpenFault(func() error { return errDiskStillFailing })
	store.SetSyncFault(func() error { return errDiskStillFailing })
	for i := range 2 { // the first sync fails; the second write's reopen fails: down
		if _, _, err := b.Runner.Submit(ctx, enginetest.Caller("bob"), "", []engine.Target{{URL: "https://example.com/b"}}); err == nil {
			t.Fatalf("submit %d with the disk failing: no error", i)
		}
	}
	store.SetSyncFault(nil)
	for _, path := range []string{"/ui/jobs/" + id, "/ui/jobs/" + id + "/0"} {
		got := b.do(t, br, http.MethodGet, path, nil)
		if got.code != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" ||
			!strings.Contains(got.body, "Store unavailable") || !strings.Contains(got.body, "a disk error") {
			t.Fatalf("GET %s with the store down: %d (Retry-After %q), want 503 naming the disk error: %s", path, got.code, got.header.Get("Retry-After"), got.body)
		}
	}

	store.SetOpenFault(nil)
	testkit.WaitFor(t, "the store to open again", func() bool {
		_, err := b.Runner.Lookup(id)
		return err == nil
	})
	if got := b.do(t, br, http.MethodGet, "/ui/jobs/"+id, nil); got.code != http.StatusOK {
		t.Fatalf("job page after the store opened: %d: %s", got.code, got.body)
	}
}
