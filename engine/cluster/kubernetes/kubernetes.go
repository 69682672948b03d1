// Package kubernetes is the Kubernetes provider of a siftbatch cluster:
// protoactor's, through which the pods of the cluster find each other
// with the Kubernetes API. The pod's service account needs to get, watch
// and patch pods in its namespace (docs/k8s/rbac.yaml). It is a package of its
// own because it brings Kubernetes' client library: a program that runs
// nodes elsewhere does not link it.
package kubernetes

import (
	"fmt"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"

	"github.com/sift/batch/engine/cluster"
)

// Provider returns the Kubernetes provider, for [cluster.Config].Provider.
// It is made when the node starts, from the pod's in-cluster
// configuration: outside Kubernetes, Start fails with that error.
func Provider() cluster.Provider {
	return cluster.NewProvider("k8s", func() (pacluster.ClusterProvider, error) {
		p, err := k8s.New()
		if err != nil {
			return nil, fmt.Errorf("kubernetes provider: %w", err)
		}
		return p, nil
	})
}
