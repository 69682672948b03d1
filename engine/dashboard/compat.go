package dashboard

import (
	"errors"
	"strings"

	"github.com/sift/batch/engine"
)

// Until the engine has ListAll and FindJobs (issue 26's engine side),
// these stand in for them. TEMPORARY: removed at the merge.

type allLister interface {
	ListAll(opt engine.ListOptions) ([]engine.Job, string, error)
}

type jobFinder interface {
	FindJobs(caller, prefix string, limit int) ([]engine.Job, error)
}

var errNoListAll = errors.New("list every caller's jobs: not in this engine")

func listAll(r runner, opt engine.ListOptions) ([]engine.Job, string, error) {
	if l, ok := r.(allLister); ok {
		return l.ListAll(opt)
	}
	return nil, "", errNoListAll
}

func findJobs(r runner, caller, prefix string, limit int) ([]engine.Job, error) {
	if f, ok := r.(jobFinder); ok {
		return f.FindJobs(caller, prefix, limit)
	}
	var out []engine.Job
	cursor := ""
	for {
		var (
			jobs []engine.Job
			next string
			err  error
		)
		if caller == "" {
			jobs, next, err = listAll(r, engine.ListOptions{Limit: engine.MaxListLimit, Cursor: cursor})
		} else {
			jobs, next, err = r.List(caller, engine.ListOptions{Limit: engine.MaxListLimit, Cursor: cursor})
		}
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if strings.HasPrefix(j.ID, prefix) && len(out) < limit {
				out = append(out, j)
			}
		}
		if next == "" || len(out) == limit {
			return out, nil
		}
		cursor = next
	}
}
