//go:build k8s

package clusterflags

import (
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/kubernetes"
)

// kubernetesProvider is the Kubernetes provider: this build has it (-tags
// k8s).
func kubernetesProvider() (cluster.Provider, error) { return kubernetes.Provider(), nil }
