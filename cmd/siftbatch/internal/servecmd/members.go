package servecmd

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/sift/batch/engine/cluster"
)

// Log keys of logMembers.
const (
	logKeyCount = "count"
	logKeyNodes = "nodes"
)

// membersLog logs a cluster node's members at each change, in a goroutine
// of its own, until stop: one Info line "cluster members" with their count
// and their names, comma-separated and sorted (a member that has not said
// who it is reads as its address). An operator reads there when the node
// saw a peer leave or come back; the fault harness (engine/cluster/faults)
// counts the cluster's sides from these lines.
type membersLog struct {
	done chan struct{} // closed by stop
	left chan struct{} // closed when the goroutine has returned
}

// startMembersLog starts logging node's members on log.
func startMembersLog(node *cluster.Node, log *slog.Logger) *membersLog {
	ml := &membersLog{done: make(chan struct{}), left: make(chan struct{})}
	go func() {
		defer close(ml.left)
		last := "\x00" // no list logged yet
		for {
			changed := node.Changed() // before Members: no change is missed
			names := node.Members()
			slices.Sort(names)
			if list := strings.Join(names, ","); list != last {
				last = list
				log.Info("cluster members", slog.Int(logKeyCount, len(names)), slog.String(logKeyNodes, list))
			}
			select {
			case <-changed:
			case <-ml.done:
				return
			}
		}
	}()
	return ml
}

// stop ends the goroutine and waits for it. It is not safe to call twice.
func (ml *membersLog) stop() {
	close(ml.done)
	<-ml.left
}
