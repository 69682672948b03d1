package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/httpapi"
)

// TestClient_SessionThroughEveryMethod submits a job, waits for it, reads
// it, a target and its results, lists it, and checks each answer against
// the runner's own view.
func TestClient_SessionThroughEveryMethod(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	ctx := context.Background()
	ts := append(targets("s", 2), client.Target{URL: "https://example.com/x/fail"})

	sub, err := c.Submit(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	if sub.ID == "" || sub.Reused || sub.Location != "/v1/batch/"+sub.ID || sub.Status != sub.Location {
		t.Fatalf("submit answered %+v", sub)
	}
	job, err := c.Wait(ctx, sub.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !job.Ended() || job.Status != engine.StatusPartial || job.TargetsTotal != 3 || job.TargetsDone != 3 || job.TargetsFailed != 1 || len(job.Targets) != 3 {
		t.Fatalf("wait answered %+v", job)
	}
	if job.Targets[2].Status != engine.TargetFailed || job.Targets[2].Error != "HTTP 404 Not Found" || job.Targets[2].Hint != "check the URL" || job.Targets[0].Result != nil {
		t.Fatalf("wait's targets: %+v", job.Targets)
	}
	rj, _ := b.Runner.Job(sub.ID)
	if job.CreatedAt != rj.CreatedAt || job.Created().Unix() != rj.CreatedAt {
		t.Fatalf("created_at %d, runner's %d", job.CreatedAt, rj.CreatedAt)
	}

	again, err := c.Submit(ctx, ts)
	if err != nil || again.ID != sub.ID || !again.Reused {
		t.Fatalf("the same targets again: %+v, %v; want job %s reused", again, err, sub.ID)
	}

	got, err := c.Job(ctx, sub.ID)
	if err != nil || got.Status != engine.StatusPartial || len(got.Targets) != 3 {
		t.Fatalf("job: %+v, %v", got, err)
	}
	tg, err := c.Target(ctx, sub.ID, 1)
	if err != nil || tg.Idx != 1 || tg.Status != engine.TargetDone || tg.Result == nil || tg.Result.Content != "page "+ts[1].URL || tg.Result.Meta["status"] != float64(200) {
		t.Fatalf("target 1: %+v, %v", tg, err)
	}

	var idx []int
	for r, err := range c.Results(ctx, sub.ID) {
		if err != nil {
			t.Fatal(err)
		}
		idx = append(idx, r.Idx)
		if want := r.Idx < 2; (r.Result != nil) != want || want && r.Result.Content != "page "+ts[r.Idx].URL {
			t.Fatalf("result %d: %+v", r.Idx, r)
		}
	}
	if !slices.Equal(idx, []int{0, 1, 2}) {
		t.Fatalf("results gave targets %v", idx)
	}

	var ids []string
	for j, err := range c.List(ctx, client.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if !slices.Equal(ids, []string{sub.ID}) {
		t.Fatalf("list: %v", ids)
	}
	if err := c.Cancel(ctx, sub.ID); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("cancel of an ended job: %v; want ErrConflict", err)
	}
}

// TestClient_ListByCallerAndTimes: an admin key lists a caller's jobs and
// every caller's, each with its caller and times; a standard key's list
// by caller is ErrForbidden; a job's times are decoded.
func TestClient_ListByCallerAndTimes(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{JobsPerCaller: 4}, httpapi.Options{})
	ctx := context.Background()
	var want []string // newest first
	for i, key := range []string{"alice-key", "bob-key", "alice-key"} {
		sub, err := b.client(t, key).Submit(ctx, targets(fmt.Sprintf("l%d", i), 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.client(t, key).Wait(ctx, sub.ID, 0); err != nil {
			t.Fatal(err)
		}
		want = append([]string{sub.ID}, want...)
		b.Clock.Advance(time.Second)
	}
	root := b.client(t, "root-key")
	list := func(c *client.Client, opt client.ListOptions) (ids, callers []string, err error) {
		for j, err := range c.List(ctx, opt) {
			if err != nil {
				return nil, nil, err
			}
			if j.StartedAt == 0 || j.EndedAt == 0 {
				t.Fatalf("job %s without its times: %+v", j.ID, j)
			}
			ids, callers = append(ids, j.ID), append(callers, j.Caller)
		}
		return ids, callers, nil
	}
	ids, callers, err := list(root, client.ListOptions{Caller: "*", Limit: 2})
	if err != nil || !slices.Equal(ids, want) || !slices.Equal(callers, []string{"alice", "bob", "alice"}) {
		t.Fatalf("caller=*: %v %v %v, want %v", ids, callers, err, want)
	}
	ids, _, err = list(root, client.ListOptions{Caller: "bob"})
	if err != nil || !slices.Equal(ids, want[1:2]) {
		t.Fatalf("caller=bob: %v %v", ids, err)
	}
	ids, _, err = list(root, client.ListOptions{})
	if err != nil || len(ids) != 0 {
		t.Fatalf("the admin's own: %v %v", ids, err)
	}
	_, _, err = list(b.client(t, "alice-key"), client.ListOptions{Caller: "alice"})
	var ce *client.Error
	if !errors.Is(err, client.ErrForbidden) || !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
		t.Fatalf("alice's list by caller: %v, want ErrForbidden", err)
	}
	job, err := b.client(t, "alice-key").Job(ctx, want[0])
	if err != nil || job.StartedAt == 0 || job.EndedAt < job.StartedAt || job.Caller != "" {
		t.Fatalf("job: %+v %v", job, err)
	}
}

// TestClient_CancelAndTypedErrors cancels a live job and checks each
// error answer's type: 401, 404 (engine.ErrNotFound), 409, 422
// (engine.ErrInvalid, ErrNoTargets), 429 (engine.ErrCallerBusy).
func TestClient_CancelAndTypedErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key", client.WithRetry(1, 0))
	ctx := context.Background()

	held, err := c.Submit(ctx, []client.Target{{URL: "https://example.com/h/hold"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(ctx, targets("other", 1))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 429 || e.RetryAfter <= 0 || !errors.Is(err, client.ErrTooManyRequests) || !errors.Is(err, engine.ErrCallerBusy) || errors.Is(err, engine.ErrBusy) {
		t.Fatalf("a second live job: %v (%+v); want 429 busy with Retry-After", err, e)
	}
	if err := c.Cancel(ctx, held.ID); err != nil {
		t.Fatal(err)
	}
	if j := b.WaitSettled(t, held.ID); j.Status != engine.StatusCancelled {
		t.Fatalf("cancelled job is %s", j.Status)
	}
	if err := c.Cancel(ctx, held.ID); !errors.Is(err, client.ErrConflict) || !errors.As(err, &e) || e.Status != 409 || e.Hint == "" {
		t.Fatalf("cancel again: %v", err)
	}

	for _, tc := range []struct {
		name   string
		err    error
		status int
		is     []error
		isNot  []error
	}{
		{"unknown key", errOf(b.client(t, "nobody").Job(ctx, held.ID)), 401, []error{client.ErrUnauthorized}, []error{engine.ErrNotFound}},
		{"missing job", errOf(c.Job(ctx, "00112233445566778899aabbccddeeff")), 404, []error{engine.ErrNotFound}, []error{client.ErrUnauthorized}},
		{"another caller's job", errOf(b.client(t, "bob-key").Job(ctx, held.ID)), 404, []error{engine.ErrNotFound}, nil},
		{"missing target", errOf(c.Target(ctx, held.ID, 7)), 404, []error{engine.ErrNotFound}, nil},
		{"no targets", errOf(c.Submit(ctx, nil)), 422, []error{engine.ErrInvalid, engine.ErrNoTargets}, []error{engine.ErrTooManyTargets}},
		{"bad url", errOf(c.Submit(ctx, []client.Target{{URL: "ftp://x"}})), 422, []error{engine.ErrInvalid}, []error{engine.ErrNoTargets}},
		{"unhonoured option", errOf(c.Submit(ctx, []client.Target{{URL: "https://example.com/", Options: client.Options{Mode: "summary"}}})), 422, []error{engine.ErrInvalid}, nil},
		{"too many targets", errOf(c.Submit(ctx, targets("many", engine.DefaultTargetsPerJob+1))), 422, []error{engine.ErrInvalid, engine.ErrTooManyTargets}, nil},
		{"bad list status", errOf(c.ListPage(ctx, client.ListOptions{Status: "nope"})), 400, []error{client.ErrBadRequest}, nil},
	} {
		if !errors.As(tc.err, &e) || e.Status != tc.status || e.Message == "" || e.Hint == "" {
			t.Errorf("%s: %v; want an *Error %d with a message and a hint", tc.name, tc.err, tc.status)
			continue
		}
		for _, s := range tc.is {
			if !errors.Is(tc.err, s) {
				t.Errorf("%s: %v is not %v", tc.name, tc.err, s)
			}
		}
		for _, s := range tc.isNot {
			if errors.Is(tc.err, s) {
				t.Errorf("%s: %v is %v", tc.name, tc.err, s)
			}
		}
	}
}

// errOf is the error of a call's two results.
func errOf[T any](_ T, err error) error { return err }

// TestClient_SubmitWithSendsTheIdempotencyKey sends a printable UTF-8 key
// as the Idempotency-Key header, and refuses, without a request, a key
// the server would refuse; the key with other targets is
// engine.ErrIdempotencyMismatch.
func TestClient_SubmitWithSendsTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	ctx := context.Background()
	key := "agent run 7: café"
	if _, err := c.SubmitWith(ctx, targets("k", 1), client.SubmitOptions{IdempotencyKey: key}); err != nil {
		t.Fatal(err)
	}
	if got := *b.idemKey.Load(); got != key {
		t.Fatalf("the server got Idempotency-Key %q; want %q", got, key)
	}
	for _, bad := range []string{"a\tb", "line\n", strings.Repeat("k", 256), "\xff\xfe"} {
		if _, err := c.SubmitWith(ctx, targets("k", 1), client.SubmitOptions{IdempotencyKey: bad}); !errors.Is(err, client.ErrBadRequest) {
			t.Errorf("key %q: %v; want the API's 400", bad, err)
		}
	}
	if n := b.count("POST /v1/batch"); n != 1 {
		t.Fatalf("%d submits reached the server; want only the good one", n)
	}
	// The key is bound to its targets while their job is reusable.
	again, err := c.SubmitWith(ctx, targets("k", 1), client.SubmitOptions{IdempotencyKey: key})
	if err != nil || !again.Reused {
		t.Fatalf("the key with its targets again: %+v, %v; want the job reused", again, err)
	}
	_, err = c.SubmitWith(ctx, targets("other", 1), client.SubmitOptions{IdempotencyKey: key})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 422 || !errors.Is(err, engine.ErrIdempotencyMismatch) || !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("the key with other targets: %v; want 422 ErrIdempotencyMismatch", err)
	}
}

// TestNew_ChecksItsArguments refuses a base URL or key it cannot use and
// bad options, and serves an API mounted under a path prefix.
func TestNew_ChecksItsArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base, key string
		opts      []client.Option
	}{
		{"127.0.0.1:8080", "k", nil},
		{"ftp://h", "k", nil},
		{"http://", "k", nil},
		{"http://u:p@h", "k", nil},
		{"http://h/?q=1", "k", nil},
		{"http://h/#f", "k", nil},
		{"http://h", "", nil},
		{"http://h", "a key", nil},
		{"http://h", "k\n", nil},
		{"http://h", "k", []client.Option{client.WithRetry(0, time.Second)}},
		{"http://h", "k", []client.Option{client.WithRetry(1, -1)}},
		{"http://h", "k", []client.Option{client.WithHTTPClient(nil)}},
		{"http://h", "k", []client.Option{client.WithPollWait(0)}},
	} {
		if _, err := client.New(tc.base, tc.key, tc.opts...); err == nil {
			t.Errorf("New(%q, %q): no error", tc.base, tc.key)
		} else if strings.Contains(err.Error(), "a key") {
			t.Errorf("New(%q, %q): the key in the error %q", tc.base, tc.key, err)
		}
	}

	// Behind a proxy that serves the API under /sift/.
	b := setup(t, engine.Config{}, httpapi.Options{})
	mux := http.NewServeMux()
	mux.Handle("/sift/", http.StripPrefix("/sift", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp := httputil.NewSingleHostReverseProxy(mustParse(t, b.url))
		rp.ServeHTTP(w, r)
	})))
	proxy := httptest.NewServer(mux)
	t.Cleanup(proxy.Close)
	for _, base := range []string{proxy.URL + "/sift", proxy.URL + "/sift/"} {
		c, err := client.New(base, "alice-key", client.WithHTTPClient(proxy.Client()))
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Submit(context.Background(), targets("p", 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Job(context.Background(), sub.ID); err != nil {
			t.Fatalf("through %s: %v", base, err)
		}
		b.WaitSettled(t, sub.ID)
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestClient_SubmitWithKeysDifferingInEdgeSpaces submits with keys that
// differ from another only by a space at an end, " k" and "k ", and with
// a key of spaces alone. HTTP drops a header value's edge spaces, so they
// would reach the server as "k" (its job, or a 422): SubmitWith refuses
// each, without a request, with the API's 400 naming the rule; a space
// inside a key is a key of its own.
func TestClient_SubmitWithKeysDifferingInEdgeSpaces(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	ctx := context.Background()
	first, err := c.SubmitWith(ctx, targets("edge-a", 1), client.SubmitOptions{IdempotencyKey: "run 8"})
	if err != nil {
		t.Fatal(err)
	}
	before := b.count("POST /v1/batch")
	for i, key := range []string{"run 8 ", " run 8", " "} {
		s, err := c.SubmitWith(ctx, targets("edge-b"+strconv.Itoa(i), 1), client.SubmitOptions{IdempotencyKey: key})
		var e *client.Error
		if !errors.As(err, &e) || !errors.Is(err, client.ErrBadRequest) || !strings.Contains(e.Hint, "no space at either end") {
			t.Fatalf("key %q: %+v, %v; want the API's 400 naming the rule", key, s, err)
		}
	}
	if n := b.count("POST /v1/batch") - before; n != 0 {
		t.Fatalf("%d refused submits reached the server", n)
	}
	s, err := c.SubmitWith(ctx, targets("edge-c", 1), client.SubmitOptions{IdempotencyKey: "run  8"})
	if err != nil || s.Reused || s.ID == first.ID {
		t.Fatalf("key %q: %+v, %v; want a fresh job", "run  8", s, err)
	}
}

// TestClient_JobOfDotIDIsNotFound asks for jobs whose ids are path
// segments: no job has id "." or "./" + a real id, so each is an error
// matching engine.ErrNotFound, never a zero Job (the answer of another
// resource, the list at /v1/batch/, decoded as a job).
func TestClient_JobOfDotIDIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	ctx := context.Background()
	s, err := c.Submit(ctx, targets("dot", 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{".", "./" + s.ID, s.ID + "/."} {
		j, err := c.Job(ctx, id)
		if !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("Job(%q) = %+v, %v; want ErrNotFound", id, j, err)
		}
	}
}

// TestClient_SubmitReadsTheLocationOfAnOlderServer: a server from before
// "location" answers the job's path as "status" only; Location is that.
func TestClient_SubmitReadsTheLocationOfAnOlderServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/batch/abc")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"id":"abc","reused":false,"status":"/v1/batch/abc"}`)
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Submit(context.Background(), targets("old", 1))
	if err != nil || sub.Location != "/v1/batch/abc" || sub.Status != "/v1/batch/abc" {
		t.Fatalf("submit: %+v %v", sub, err)
	}
}
