//go:build !k8s

package clusterflags

import (
	"errors"

	"github.com/sift/batch/engine/cluster"
)

// kubernetesProvider is an error: this build has no Kubernetes provider.
// It brings Kubernetes' client library, which would double the command's
// size and its memory at start for everyone: build with -tags k8s (make
// build-k8s) for Kubernetes.
func kubernetesProvider() (cluster.Provider, error) {
	return cluster.Provider{}, errors.New("--cluster-provider k8s: this siftbatch was built without the Kubernetes provider; build it with -tags k8s (make build-k8s)")
}
