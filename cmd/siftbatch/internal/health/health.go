// Package health is serve's GET /healthz: the runner's health, and with
// ?cluster=1 (a liveness probe's) the node's membership of its cluster.
package health

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
)

// ClusterParam is the query parameter of GET /healthz that asks about the
// node's membership too (GET /healthz?cluster=1).
const ClusterParam = "cluster"

// Runner is the runner as the health check sees it: [engine.Runner].
type Runner interface {
	// Err is non-nil once the runner has closed or failed.
	Err() error
	// Disk is the store's file system's free space.
	Disk() engine.DiskState
}

// Member is a cluster node as the health check sees it: [cluster.Node].
type Member interface {
	Membership() cluster.Membership
}

// Handler answers GET /healthz: 200 {"status":"ok"} while r serves, 503
// {"status":"unavailable"} once it has closed or failed. While the store's
// disk is below its reserve it answers 200 {"status":"disk full",
// "free_bytes":N,"reserve_bytes":M}: the node serves reads and cancels,
// and its held jobs go on by themselves once there is room (a restart
// would not make any), so a liveness probe must not restart it.
//
// GET /healthz?cluster=1, for a liveness probe, answers as /healthz, and
// also 503 {"status":"not a member"} once node, having joined its cluster,
// has been out of its own member list for longer than grace (by now):
// protoactor never lets a member back in under its member id, so only a
// restart brings it back (docs/CLUSTER.md, Kubernetes). Before the node
// first joins, and without a node (nil: no --cluster), it answers as
// /healthz. Readiness must not use it: the Kubernetes provider counts a pod
// as a member only once it is ready. It is safe for concurrent use.
func Handler(r Runner, node Member, now func() time.Time, grace time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Err() != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, `{"status":"unavailable"}`)
			return
		}
		if node != nil && req.URL.Query().Get(ClusterParam) != "" {
			if m := node.Membership(); m.Joined && !m.Member && now().Sub(m.Since) > grace {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, `{"status":"not a member"}`)
				return
			}
		}
		if d := r.Disk(); d.Full {
			fmt.Fprintf(w, "{\"status\":\"disk full\",\"free_bytes\":%d,\"reserve_bytes\":%d}\n", d.Free, d.Reserve)
			return
		}
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
}
