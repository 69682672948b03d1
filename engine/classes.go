package engine

import "sync"

// liveClasses keeps the caller class each job was submitted with, for
// [Runner.LiveByClass], while the job may be live: the runner does not
// use a class, and does not store it. A job's entry is made before its
// submit and marked submitted after; an entry that is submitted and not
// live is dropped at each LiveByClass, and whenever the map has grown
// past twice the live jobs, so it holds little more than JobsTotal
// entries. Safe for concurrent use.
type liveClasses struct {
	mu  sync.Mutex
	m   map[string]classEntry // job id → its class
	gen uint64                // submits returned so far
}

type classEntry struct {
	class      string
	submitting bool   // its Submit has not returned: it may not be live yet
	gen        uint64 // the gen its Submit returned at
}

// submitting records id's class before its submit; live lists the live
// jobs, to prune with.
func (c *liveClasses) submitting(id, class string, live func() []Job) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]classEntry{}
	}
	c.m[id] = classEntry{class: class, submitting: true}
	n := len(c.m)
	c.mu.Unlock()
	if n > 64 {
		c.count(live, n)
	}
}

// submitted marks id's submit as returned; created false drops it.
func (c *liveClasses) submitted(id string, created bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if e, ok := c.m[id]; ok && created {
		e.submitting, e.gen = false, c.gen
		c.m[id] = e
	} else {
		delete(c.m, id)
	}
}

// count returns the live jobs' count by class, and drops the entries of
// jobs no longer live: those whose submit returned before live was read
// (so that their job, once created, was in it) and that are not in it.
// With min > 0 it prunes only if the map holds min entries or more and
// more than twice the live jobs.
func (c *liveClasses) count(live func() []Job, min int) map[string]int {
	c.mu.Lock()
	before := c.gen
	c.mu.Unlock()
	jobs := live()
	if min > 0 && min <= 2*len(jobs) {
		return nil
	}
	byClass := map[string]int{}
	isLive := make(map[string]bool, len(jobs))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range jobs {
		byClass[c.m[j.ID].class]++
		isLive[j.ID] = true
	}
	for id, e := range c.m {
		if !e.submitting && e.gen <= before && !isLive[id] {
			delete(c.m, id)
		}
	}
	return byClass
}

// LiveByClass returns how many live jobs (queued or running) there are
// by the caller class they were submitted with ([Runner.Submit]'s
// callerClass; "" for none). The runner does not store a class: a job
// read from the store of another process has "". Safe for concurrent
// use; O(live jobs).
func (r *Runner) LiveByClass() map[string]int {
	return r.classes.count(r.Live, 0)
}
