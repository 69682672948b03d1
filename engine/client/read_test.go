package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// countingTransport counts the answer bytes the client reads.
type countingTransport struct{ read atomic.Int64 }

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &ct.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// bigJob submits a job of n targets of size bytes each and waits for it.
func bigJob(t testing.TB, b *bundle, c *client.Client, n, size int) string {
	t.Helper()
	ts := make([]client.Target, n)
	for i := range ts {
		ts[i] = client.Target{URL: "https://example.com/big/" + strconv.Itoa(i) + "/size/" + strconv.Itoa(size)}
	}
	sub, err := c.Submit(context.Background(), ts)
	if err != nil {
		t.Fatal(err)
	}
	if j := b.WaitSettled(t, sub.ID); j.Status != engine.StatusDone {
		t.Fatalf("job %s", j.Status)
	}
	return sub.ID
}

// TestClient_ResultsHoldsOneResult streams a job of 4 results of 512 KiB
// and counts the answer's bytes the client has read each time it hands a
// target over: never more than that target's end plus 64 KiB, so it holds
// that result and no other (the whole answer is 2 MiB).
func TestClient_ResultsHoldsOneResult(t *testing.T) {
	t.Parallel()
	const n, size = 4, 512 << 10
	b := setup(t, engine.Config{}, httpapi.Options{})
	ct := &countingTransport{}
	c := b.client(t, "alice-key", client.WithHTTPClient(&http.Client{Transport: ct}))
	id := bigJob(t, b, c, n, size)

	// Where each target ends in the answer, read whole once.
	req, _ := http.NewRequest("GET", b.url+"/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(whole) < n*size {
		t.Fatalf("answer of %d bytes, %v", len(whole), err)
	}
	// ends[i] is the offset just past target i's closing brace: before
	// the comma and the next target, or the last one's "]}\n".
	var ends []int64
	for i := 1; i < n; i++ {
		ends = append(ends, int64(bytes.Index(whole, []byte(`{"idx":`+strconv.Itoa(i)+`,`)))-1)
	}
	ends = append(ends, int64(len(whole)-len("]}\n")))

	ct.read.Store(0)
	i := 0
	for r, err := range c.Results(context.Background(), id) {
		if err != nil {
			t.Fatal(err)
		}
		read := ct.read.Load()
		if r.Idx != i || r.Result == nil || len(r.Result.Content) != size {
			t.Fatalf("target %d: idx %d, result of %d bytes", i, r.Idx, len(r.Result.Content))
		}
		if read < ends[i] || read > ends[i]+64<<10 {
			t.Fatalf("target %d handed over with %d bytes of the answer read; it ends at %d (at most 64 KiB more may be read)", i, read, ends[i])
		}
		t.Logf("target %d: %d bytes read, %d past its end", i, read, read-ends[i])
		i++
	}
	if i != n {
		t.Fatalf("%d targets; want %d", i, n)
	}
}

// TestClient_ResultsEndsWithItsContext cancels a Results loop after its
// first target: the next step is the context's error, and the answer is
// closed (the test's goroutine check holds).
func TestClient_ResultsEndsWithItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	id := bigJob(t, b, c, 3, 256<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []error
	for r, err := range c.Results(ctx, id) {
		got = append(got, err)
		if r.Idx == 0 && err == nil {
			cancel()
		}
	}
	if len(got) != 2 || got[0] != nil || !errors.Is(got[1], context.Canceled) {
		t.Fatalf("steps %v; want the first target, then context.Canceled", got)
	}

	// Leaving the loop early is fine too.
	for _, err := range c.Results(context.Background(), id) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
}

// TestClient_ResultsReportsAnAnswerCutShort reads a Results answer whose
// connection drops in its second target (as when the job is deleted while
// it is written): the first target, then an error wrapping
// io.ErrUnexpectedEOF, and nothing after.
func TestClient_ResultsReportsAnAnswerCutShort(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	id := bigJob(t, b, c, 3, 100<<10)
	b.cut.Store(150 << 10)
	var idx []int
	var errs []error
	for r, err := range c.Results(context.Background(), id) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		idx = append(idx, r.Idx)
	}
	if !slices.Equal(idx, []int{0}) || len(errs) != 1 || !errors.Is(errs[0], io.ErrUnexpectedEOF) {
		t.Fatalf("targets %v, errors %v; want target 0, then an unexpected EOF", idx, errs)
	}
}

// TestClient_WaitEndsWithItsContext cancels a Wait while its long-poll is
// at the server: Wait returns the context's error.
func TestClient_WaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	sub, err := c.Submit(context.Background(), []client.Target{{URL: "https://example.com/h/hold"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx, sub.ID, 0)
		done <- err
	}()
	testkit.WaitFor(t, "the long-poll reaches the server", func() bool { return b.count("GET /v1/batch/{id}") >= 1 })
	cancel()
	if err := testkit.Recv(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait: %v; want context.Canceled", err)
	}
	if j, _ := b.Runner.Job(sub.ID); !engine.IsLive(j.Status) {
		t.Fatalf("job %s: a cancelled wait must leave it alone", j.Status)
	}
}

// TestClient_RetryWaitEndsWithItsContext cancels a submit while it waits
// out a 429's Retry-After (5 s, a real timer): it returns the context's
// error and sends nothing more.
func TestClient_RetryWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	if _, err := c.Submit(context.Background(), []client.Target{{URL: "https://example.com/h/hold"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx, targets("second", 1))
		done <- err
	}()
	testkit.WaitFor(t, "the second submit reaches the server", func() bool { return b.count("POST /v1/batch") == 2 })
	cancel()
	if err := testkit.Recv(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("submit: %v; want context.Canceled", err)
	}
	if n := b.count("POST /v1/batch"); n != 2 {
		t.Fatalf("%d submits; want 2: no retry after the cancel", n)
	}
}

// TestClient_WaitProgressReportsTargetsAsTheyLand waits for a job whose
// middle target is held: progress reports the first target stored while
// the job runs, then the job's end.
func TestClient_WaitProgressReportsTargetsAsTheyLand(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	ts := []client.Target{{URL: "https://example.com/p/0"}, {URL: "https://example.com/p/hold"}, {URL: "https://example.com/p/2"}}
	sub, err := c.Submit(context.Background(), ts)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan client.Job, 16)
	done := make(chan client.Job, 1)
	go func() {
		j, err := c.WaitProgress(context.Background(), sub.ID, 0, 20e6, func(j client.Job) { seen <- j })
		if err != nil {
			t.Error(err)
		}
		done <- j
	}()
	for {
		j := testkit.Recv(t, seen)
		if j.Ended() {
			t.Fatalf("the job ended with its middle target held: %+v", j)
		}
		if j.TargetsDone == 1 {
			break
		}
	}
	b.gate.Open()
	j := testkit.Recv(t, done)
	if j.Status != engine.StatusDone || j.TargetsDone != 3 {
		t.Fatalf("wait ended with %+v", j)
	}
	if last := testkit.Recv(t, seen); last.Status != j.Status || last.TargetsDone != 3 {
		t.Fatalf("last progress %+v; want the ended job", last)
	}
}

// TestClient_ListIteratesOverPages lists 5 jobs 2 to a page: 3 requests,
// newest first, and the status filter.
func TestClient_ListIteratesOverPages(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	c := b.client(t, "alice-key")
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		sub, err := c.Submit(ctx, targets("l"+strconv.Itoa(i), 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, sub.ID, 0); err != nil {
			t.Fatal(err)
		}
		b.Clock.Advance(1e9) // a distinct created_at each
		ids = append([]string{sub.ID}, ids...)
	}
	var got []string
	for j, err := range c.List(ctx, client.ListOptions{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != engine.StatusDone || j.TargetsTotal != 1 || j.Targets != nil {
			t.Fatalf("listed %+v", j)
		}
		got = append(got, j.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("listed %v; want %v", got, ids)
	}
	if n := b.count("GET /v1/batch"); n != 3 {
		t.Fatalf("%d list requests; want 3 pages", n)
	}
	p, err := c.ListPage(ctx, client.ListOptions{Status: "live"})
	if err != nil || len(p.Jobs) != 0 || p.NextCursor != "" {
		t.Fatalf("live jobs: %+v, %v", p, err)
	}
	// An error ends the sequence after one step.
	steps := 0
	for _, err := range c.List(ctx, client.ListOptions{Limit: 1000}) {
		steps++
		if !errors.Is(err, client.ErrBadRequest) {
			t.Fatalf("limit 1000: %v", err)
		}
	}
	if steps != 1 {
		t.Fatalf("%d steps", steps)
	}
}
