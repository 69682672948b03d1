package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// list is [Node.List], or [Node.ListAll] when all.
func (f *forwarder) list(ctx context.Context, caller string, all bool, opt engine.ListOptions) (jobs []engine.Job, next string, unavailable []string, err error) {
	type entry struct {
		job    engine.Job
		cursor string
	}
	b := f.life.bound.Load()
	if b == nil {
		return nil, "", nil, errors.New("list jobs: the node is not started")
	}
	var (
		local     []engine.Job
		cursors   []string
		localNext string
	)
	if all {
		local, cursors, localNext, err = b.runner.ListAllAt(opt)
	} else {
		local, cursors, localNext, err = b.runner.ListAt(caller, opt)
	}
	if err != nil {
		return nil, "", nil, err // a bad request is refused here, before any member is asked
	}
	merged := make([]entry, 0, len(local))
	for i, j := range local {
		merged = append(merged, entry{j, cursors[i]})
	}
	// frontier is the newest of the nodes' next cursors: a node that has
	// more has listed every job of its own down to its next cursor, and
	// none past it, so the merged page holds only the jobs down to the
	// frontier, and goes on from there. A node's page cut short by
	// engine.ListScan ends above its last job looked at, maybe with few
	// jobs, or none.
	frontier := ""
	atFrontier := func(next string) {
		if next != "" && (frontier == "" || engine.CompareCursors(next, frontier) < 0) {
			frontier = next
		}
	}
	atFrontier(localNext)
	members := f.members.current()
	self := f.life.me()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	req := &clusterpb.ListRequest{Caller: caller, Status: opt.Status, Limit: int32(opt.Limit), Cursor: opt.Cursor, All: all}
	for _, m := range members {
		if self.is(m) {
			continue
		}
		wg.Go(func() {
			reply, err := f.listThere(ctx, m, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				unavailable = append(unavailable, f.members.nameOf(m))
				return
			}
			for _, j := range reply.Jobs {
				owner := caller
				if all {
					owner = j.Caller
				}
				merged = append(merged, entry{engine.Job{ID: j.Id, Caller: owner, Status: j.Status, Error: j.Error,
					TargetsTotal: int(j.TargetsTotal), TargetsDone: int(j.TargetsDone), TargetsFailed: int(j.TargetsFailed),
					CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, EndedAt: j.EndedAt, Duration: time.Duration(j.DurationNs)}, j.Cursor})
			}
			switch {
			case reply.More && reply.Next != "":
				atFrontier(reply.Next)
			case reply.More && len(reply.Jobs) > 0: // an older node: its pages are full
				atFrontier(reply.Jobs[len(reply.Jobs)-1].Cursor)
			}
		})
	}
	wg.Wait()
	unavailable = append(unavailable, f.members.absent(members)...)
	slices.Sort(unavailable)
	unavailable = slices.Compact(unavailable)
	slices.SortFunc(merged, func(a, b entry) int { return engine.CompareCursors(a.cursor, b.cursor) })
	merged = slices.CompactFunc(merged, func(a, b entry) bool { return a.job.ID == b.job.ID })
	limit := opt.Limit
	if limit == 0 {
		limit = engine.DefaultListLimit
	}
	if frontier != "" {
		cut, _ := slices.BinarySearchFunc(merged, frontier, func(e entry, f string) int {
			if engine.CompareCursors(e.cursor, f) <= 0 {
				return -1
			}
			return 1
		})
		merged, next = merged[:cut], frontier
	}
	if len(merged) > limit {
		merged, next = merged[:limit], merged[limit-1].cursor
	}
	jobs = make([]engine.Job, len(merged))
	for i := range merged {
		jobs[i] = merged[i].job
	}
	return jobs, next, unavailable, nil
}

// listThere asks member m for its page.
func (f *forwarder) listThere(ctx context.Context, m *pacluster.Member, req *clusterpb.ListRequest) (*clusterpb.ListReply, error) {
	res, err := f.request(ctx, f.life.system(), actor.NewPID(m.Address(), nodeActor), req, f.timeout, nil)
	if err != nil {
		return nil, err
	}
	reply, ok := res.(*clusterpb.ListReply)
	switch {
	case !ok:
		return nil, errors.New("unexpected answer")
	case reply.BadRequest != "":
		return nil, fmt.Errorf("%w: %s", engine.ErrBadList, reply.BadRequest)
	case reply.Error != "":
		return nil, errors.New(reply.Error)
	}
	return reply, nil
}
