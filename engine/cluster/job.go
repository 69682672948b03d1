package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// ErrNodeUnavailable is [Node.ReadJob]'s error when the node that holds the
// job is not a member now, or did not answer within the Timeout: the job
// may be there, and cannot be read now (the API's 503 "node
// unavailable").
var ErrNodeUnavailable = errors.New("node unavailable")

// jobReplyBytes bounds the targets a JobReply carries, by their text (the
// rest are left out, more_targets set): a Part's size, since protoactor
// sends up to 8 messages in one gRPC message, whose limit is 4 MiB (see
// partSize).
const jobReplyBytes = partSize

// ReadJob reads job id and its targets when the job is another node's,
// from that node, for whoever asks (the asking node decides who may see
// it: the dashboard does). node names the node that holds it:
//
//   - node "" and no error: the job is this node's to read (its id has
//     this node's tag, or the tag of no node this one ever met): nothing
//     was asked, read it from the runner;
//   - job zero (no ID) and no error: that node has no such job;
//   - an error wrapping [ErrNodeUnavailable]: that node is not a member
//     now, or did not answer within the Timeout, or runs a siftbatch older
//     than ReadJob (its text names the node when it is known); the job may
//     be there;
//   - else the job, with its caller, and its targets in order, as
//     [engine.Runner.Targets] reads them there: the first of them only
//     (fewer than job.TargetsTotal) when their text passes 256 KiB.
//
// Safe for concurrent use.
func (n *Node) ReadJob(ctx context.Context, id string) (job engine.Job, targets []engine.TargetStatus, node string, err error) {
	return n.fwd.readJob(ctx, id)
}

// readJob is [Node.ReadJob].
func (f *forwarder) readJob(ctx context.Context, id string) (job engine.Job, targets []engine.TargetStatus, node string, err error) {
	tag, ok := idTag(id)
	if !ok || tag == f.tag {
		return engine.Job{}, nil, "", nil
	}
	m, known := f.members.holder(tag)
	if m == nil {
		if !known {
			return engine.Job{}, nil, "", nil
		}
		name := f.members.tagName(tag)
		return engine.Job{}, nil, name, unavailableErr(name)
	}
	name := f.members.nameOf(m)
	if !f.members.readsJobs(m) {
		return engine.Job{}, nil, name, fmt.Errorf("%w: node %s runs an older siftbatch, whose jobs cannot be read from another node", ErrNodeUnavailable, name)
	}
	res, err := f.request(ctx, f.life.system(), actor.NewPID(m.Address(), nodeActor), &clusterpb.JobRequest{Id: id}, f.timeout, nil)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Info("node did not answer", slog.String(logKeyNode, name), slog.String(logKeyJobID, id))
		}
		return engine.Job{}, nil, name, unavailableErr(name)
	}
	reply, ok := res.(*clusterpb.JobReply)
	switch {
	case !ok:
		return engine.Job{}, nil, name, unavailableErr(name)
	case !reply.Found || reply.Job == nil:
		return engine.Job{}, nil, name, nil
	case reply.Job.Id != id:
		return engine.Job{}, nil, name, unavailableErr(name)
	}
	pj := reply.Job
	job = engine.Job{ID: pj.Id, Caller: pj.Caller, Status: pj.Status, Error: pj.Error,
		TargetsTotal: int(pj.TargetsTotal), TargetsDone: int(pj.TargetsDone), TargetsFailed: int(pj.TargetsFailed),
		CreatedAt: pj.CreatedAt, StartedAt: pj.StartedAt, EndedAt: pj.EndedAt, Duration: time.Duration(pj.DurationNs)}
	targets = make([]engine.TargetStatus, 0, len(reply.Targets))
	for _, t := range reply.Targets {
		ts := engine.TargetStatus{Idx: int(t.Idx), URL: t.Url, Status: t.Status, Error: t.Error, Hint: t.Hint,
			Duration: time.Duration(t.DurationNs), StoredAt: t.StoredAt}
		if len(t.Options) > 0 {
			_ = json.Unmarshal(t.Options, &ts.Options) // the holder encoded them: a field it has and this node lacks is dropped
		}
		targets = append(targets, ts)
	}
	return job, targets, name, nil
}

func unavailableErr(node string) error {
	if node == "" {
		return fmt.Errorf("%w: the node that holds this job is not in the cluster now, or not yet known to this one", ErrNodeUnavailable)
	}
	return fmt.Errorf("%w: node %s holds this job and did not answer", ErrNodeUnavailable, node)
}

// jobHere answers a JobRequest from this node's runner.
func (a *answerer) jobHere(m *clusterpb.JobRequest) *clusterpb.JobReply {
	r := a.life.run.jobs
	if r == nil {
		return &clusterpb.JobReply{}
	}
	j, ts, ok := r.Targets(m.Id)
	if !ok {
		return &clusterpb.JobReply{} // no such job (or none readable: the runner does not tell them apart)
	}
	out := &clusterpb.JobReply{Found: true, Job: &clusterpb.ListedJob{Id: j.ID, Status: j.Status, Error: j.Error, TargetsTotal: int32(j.TargetsTotal),
		TargetsDone: int32(j.TargetsDone), TargetsFailed: int32(j.TargetsFailed), CreatedAt: j.CreatedAt,
		Caller: j.Caller, StartedAt: j.StartedAt, EndedAt: j.EndedAt, DurationNs: int64(j.Duration)}}
	size := 0
	for _, t := range ts {
		opts, _ := json.Marshal(t.Options) // plain strings and bools: never fails
		size += len(t.URL) + len(t.Error) + len(t.Hint) + len(t.Status) + len(opts) + 32
		if size > jobReplyBytes {
			out.MoreTargets = true
			break
		}
		out.Targets = append(out.Targets, &clusterpb.JobTarget{Idx: int32(t.Idx), Url: t.URL, Status: t.Status, Error: t.Error, Hint: t.Hint,
			DurationNs: int64(t.Duration), StoredAt: t.StoredAt, Options: opts})
	}
	return out
}
