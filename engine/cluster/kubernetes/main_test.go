package kubernetes

import (
	"testing"

	"github.com/sift/batch/engine/enginetest"
)

// TestMain checks that no test leaves a goroutine behind, but those
// protoactor-go leaves (enginetest.ClusterMain); under the race detector
// protoactor's own data races are suppressed (engine/cluster's
// testdata/race.supp), its Kubernetes provider's member list updates among
// them.
func TestMain(m *testing.M) {
	enginetest.ClusterMain(m, "../testdata/race.supp")
}
