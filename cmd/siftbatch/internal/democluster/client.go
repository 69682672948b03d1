package democluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/fixture"
	"github.com/sift/batch/engine"
)

// answer is what one node answered for one job.
type answer struct {
	code        int    // the HTTP status; 0 before any answer; -1 no answer (the node is down)
	status      string // the job's, on a 200
	err         string // the job's error on a 200, the answer's error else
	done, total int
	failed      int
}

// String is the answer as the live view shows it.
func (a answer) String() string {
	switch a.code {
	case 0:
		return "…"
	case -1:
		return "down"
	}
	return strconv.Itoa(a.code)
}

// job is one job as the demo follows it: the pollers set its answers.
type job struct {
	label  string // job1
	caller string
	node   int // the index of the node that holds it (by its id's tag)
	id     string

	mu      sync.Mutex
	answers [nodeCount]answer
	asked   [nodeCount]time.Time // when the read in flight through each node was sent
	last    answer               // the last 200, through any node
}

// ask records that a read of j through the node i is sent.
func (j *job) ask(i int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.asked[i] = time.Now()
}

func (j *job) set(i int, a answer) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.answers[i] = a
	j.asked[i] = time.Time{}
	if a.code == http.StatusOK {
		j.last = a
	}
}

func (j *job) state() (last answer, answers [nodeCount]answer) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last, j.answers
}

// waiting reports, for each node, whether a read through it has been
// waiting for its answer longer than slowRead.
func (j *job) waiting() (w [nodeCount]bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, t := range j.asked {
		w[i] = !t.IsZero() && time.Since(t) > slowRead
	}
	return w
}

// terminal reports whether the job has ended, as last read.
func (j *job) terminal() bool {
	last, _ := j.state()
	return last.status != "" && !engine.IsLive(last.status)
}

// pages are the kinds of page of a job of n targets: slow ones, every
// third fast. A job of the victim's (held) ends on a page the fixture
// holds until the kill, so that it is still running when the victim is
// killed, however few its targets; its first page is not held, so that it
// shows progress before.
func pages(n int, held bool) []string {
	kinds := make([]string, n)
	for t := range kinds {
		kinds[t] = fixture.Slow
		if t%3 == 2 {
			kinds[t] = fixture.Fast
		}
	}
	if held && n > 1 {
		kinds[n-1] = fixture.Hold
	}
	return kinds
}

// healthy reports whether n answers /healthz 200.
func (d *demo) healthy(ctx context.Context, n *node) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.base+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// form submits one small job to each node, then waits until every node
// answers 200 for every other node's: the cluster has formed.
func (d *demo) form(ctx context.Context) error {
	ids := make([]string, nodeCount)
	for i, n := range d.nodes {
		id, err := d.submit(ctx, formLimit, n, probe, []string{d.fix.URL(fixture.Fast, 99, i)}, nil)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	if err := d.waitUntil(ctx, formLimit, "every node to answer for every node's job (the cluster to form)", func() bool {
		for i, id := range ids {
			for k, n := range d.nodes {
				if k != i && d.read(ctx, n, probe, id).code != http.StatusOK {
					return false
				}
			}
		}
		return true
	}); err != nil {
		return err
	}
	d.event("the cluster has formed (%.1fs): every node answers 200 for a job of every other node", time.Since(d.start).Seconds())
	return nil
}

// submitJob submits a job of targets pages from caller to the node i,
// trying again while it is refused (429, 503) for at most limit; then the
// live view follows it, read through every node. A job submitted to the
// victim before its kill ends on a held page (pages).
func (d *demo) submitJob(ctx context.Context, limit time.Duration, caller string, i, targets int) (*job, error) {
	k := int(d.labels.Add(1)) - 1
	label := fmt.Sprintf("job%d", k+1)
	kinds := pages(targets, i == victimIdx)
	urls := make([]string, targets)
	for t, kind := range kinds {
		urls[t] = d.fix.URL(kind, k, t)
	}
	n := d.nodes[i]
	refused := func(code int, msg string) {
		d.event("%s %s → %s: %d %q, trying again", label, caller, n.name, code, msg)
	}
	id, err := d.submit(ctx, limit, n, caller, urls, refused)
	if err != nil {
		return nil, err
	}
	holder := -1
	for h, m := range d.nodes {
		if strings.HasPrefix(id, m.tag) {
			holder = h
		}
	}
	if holder != i {
		return nil, fmt.Errorf("demo-cluster: %s submitted to %s has id %s, not of %s's tag %s", label, n.name, id, n.name, n.tag)
	}
	j := &job{label: label, caller: caller, node: holder, id: id}
	d.mu.Lock()
	d.jobs = append(d.jobs, j)
	d.mu.Unlock()
	d.view.add(j)
	d.event("%s %s → %s: 202, id %s… (%s's tag)", label, caller, n.name, id[:12], n.name)
	for h := range d.nodes {
		d.polling.Add(1)
		go func() {
			defer d.polling.Done()
			d.poll(j, h)
		}()
	}
	return j, nil
}

// submit posts a job of urls from caller to n until it is admitted (202),
// for at most limit; refused, if not nil, is told each new refusal.
func (d *demo) submit(ctx context.Context, limit time.Duration, n *node, caller string, urls []string, refused func(code int, msg string)) (string, error) {
	ts := make([]engine.Target, len(urls))
	for i, u := range urls {
		ts[i] = engine.Target{URL: u}
	}
	body, err := json.Marshal(map[string]any{"targets": ts})
	if err != nil {
		return "", err
	}
	var id string
	var last string
	err = d.waitEvery(ctx, retryEvery, limit, caller+"'s job to be admitted by "+n.name, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.base+"/v1/batch", strings.NewReader(string(body)))
		if err != nil {
			return false
		}
		req.Header.Set("Authorization", "Bearer "+d.keys[caller])
		req.Header.Set("Content-Type", "application/json")
		code, out, err := d.do(req)
		if err != nil {
			return false
		}
		var a struct {
			ID    string `json:"id"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal(out, &a)
		if code == http.StatusAccepted && a.ID != "" {
			id = a.ID
			return true
		}
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			if seen := fmt.Sprint(code, a.Error); seen != last && refused != nil {
				refused(code, a.Error)
				last = seen
			}
			return false
		}
		id, last = "", fmt.Sprintf("%d %s", code, a.Error)
		return false
	})
	if err != nil {
		if last != "" {
			err = fmt.Errorf("%w (last answer: %s)", err, last)
		}
		return "", err
	}
	return id, nil
}

// do sends req and reads the answer.
func (d *demo) do(req *http.Request) (int, []byte, error) {
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out, err
}

// read is what n answers for the job id of caller.
func (d *demo) read(ctx context.Context, n *node, caller, id string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.base+"/v1/batch/"+id, nil)
	if err != nil {
		return answer{code: -1}
	}
	req.Header.Set("Authorization", "Bearer "+d.keys[caller])
	code, out, err := d.do(req)
	if err != nil {
		return answer{code: -1}
	}
	var j struct {
		Status        string `json:"status"`
		Error         string `json:"error"`
		TargetsTotal  int    `json:"targets_total"`
		TargetsDone   int    `json:"targets_done"`
		TargetsFailed int    `json:"targets_failed"`
	}
	_ = json.Unmarshal(out, &j)
	return answer{code: code, status: j.Status, err: j.Error, done: j.TargetsDone, total: j.TargetsTotal, failed: j.TargetsFailed}
}

// poll reads j through the node i every pollEvery until the polling stops.
func (d *demo) poll(j *job, i int) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		j.ask(i)
		a := d.read(d.pollCtx, d.nodes[i], j.caller, j.id)
		if d.pollCtx.Err() != nil {
			return
		}
		j.set(i, a)
		select {
		case <-d.pollCtx.Done():
			return
		case <-tick.C:
		}
	}
}

// stopPolling stops the pollers and the view's refresh, and waits for them.
func (d *demo) stopPolling() {
	d.stopPoll()
	d.polling.Wait()
}

// render refreshes the view every refreshEvery until the polling stops.
func (d *demo) render() {
	defer d.polling.Done()
	tick := time.NewTicker(refreshEvery)
	defer tick.Stop()
	v := d.view
	for {
		select {
		case <-d.pollCtx.Done():
			v.refresh()
			return
		case <-tick.C:
			v.refresh()
		}
	}
}

// event shows a step of the script.
func (d *demo) event(format string, args ...any) {
	d.view.event(fmt.Sprintf(format, args...))
}

func (d *demo) allJobs() []*job {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.jobs)
}

// survivorNames is "n1 and n2".
func (d *demo) survivorNames() string {
	var names []string
	for i, n := range d.nodes {
		if i != victimIdx {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, " and ")
}

// survivorsDone is how many targets the jobs of js not on the victim have
// done, as last read.
func (d *demo) survivorsDone(js []*job) int {
	sum := 0
	for _, j := range js {
		if j.node != victimIdx {
			last, _ := j.state()
			sum += last.done
		}
	}
	return sum
}

// callersOf returns the callers of js, each once, in order.
func callersOf(js []*job) []string {
	var cs []string
	for _, j := range js {
		if !slices.Contains(cs, j.caller) {
			cs = append(cs, j.caller)
		}
	}
	return cs
}

// jobLabels is "job3 and job5".
func jobLabels(js []*job) string {
	ls := make([]string, len(js))
	for i, j := range js {
		ls[i] = j.label
	}
	return strings.Join(ls, " and ")
}
