package engine

import (
	"cmp"
	"slices"

	"github.com/sift/batch/actors"
	"github.com/sift/batch/persistence"
)

// Live returns the runner's live jobs (queued or running) in submit order,
// the order of the rotation, each from its actor's latest snapshot: no
// store read, no message. Safe for concurrent use; O(live jobs).
func (r *Runner) Live() []Job {
	var recs []persistence.JobRecord
	r.views.Range(func(s *actors.Snapshot) bool {
		if IsLive(s.Job.Status) {
			recs = append(recs, s.Job)
		}
		return true
	})
	slices.SortFunc(recs, func(a, b persistence.JobRecord) int {
		return cmp.Or(cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
	jobs := make([]Job, len(recs))
	for i := range recs {
		jobs[i] = toJob(&recs[i])
	}
	return jobs
}
