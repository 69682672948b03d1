// Package kubernetes is the Kubernetes provider of a siftbatch cluster:
// protoactor's, through which the pods of the cluster find each other
// with the Kubernetes API. The pod's service account needs to get, watch
// and patch pods in its namespace (docs/k8s/rbac.yaml). It is a package of its
// own because it brings Kubernetes' client library: a program that runs
// nodes elsewhere does not link it.
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sift/batch/engine/cluster"
)

// namespaceFile is where protoactor's provider reads its pod's namespace
// (the service account's mount); without it, the namespace is "".
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// How the labels of a previous run are cleared: each request's timeout,
// and the attempts a failure the API may not repeat (no answer, a 5xx, a
// 429) is given, a pause apart.
const (
	clearTimeout  = 5 * time.Second
	clearAttempts = 3
)

// clearPause is the pause between attempts; tests shorten it.
var clearPause = time.Second

// Provider returns the Kubernetes provider, for [cluster.Config].Provider.
// It is made when the node starts, from the pod's in-cluster
// configuration: outside Kubernetes, Start fails with that error.
//
// Before protoactor's provider starts, it removes from this node's own pod
// the labels protoactor's provider sets (cluster.proto.actor/*), which a
// previous run of the node left if it did not stop gracefully (a crash the
// kubelet restarted in place): protoactor's provider keeps the labels it
// finds over its own, and its member id among them, which the other nodes
// have blocked for good since that run left. So each start labels a new
// member id. Start fails if they cannot be removed (the pod not found, the
// Role missing, the API not answering in three attempts).
func Provider() cluster.Provider {
	return newProvider(rest.InClusterConfig, ownPod, nil)
}

// ownPod names this node's pod as protoactor's provider finds it: the
// hostname, in the namespace of the service account's mount (an error
// without one).
func ownPod() (name, namespace string, err error) {
	name, err = os.Hostname()
	if err != nil {
		return "", "", fmt.Errorf("own pod: %w", err)
	}
	b, err := os.ReadFile(namespaceFile)
	if err != nil || len(b) == 0 {
		// protoactor's provider would ask for its pod in no namespace, and
		// fail for good: say so now.
		return "", "", errors.New("own pod: no namespace: the pod has no service account token mounted")
	}
	return name, string(b), nil
}

// newProvider is [Provider] with the API's configuration from config and
// this node's pod named by pod; adjust, if not nil, adjusts protoactor's
// provider before it starts (tests: its namespace).
func newProvider(config func() (*rest.Config, error), pod func() (name, namespace string, err error), adjust func(*k8s.Provider)) cluster.Provider {
	return cluster.NewProvider("k8s", func() (pacluster.ClusterProvider, error) {
		cfg, err := config()
		if err != nil {
			return nil, fmt.Errorf("kubernetes provider: %w", err)
		}
		name, ns, err := pod()
		if err != nil {
			return nil, fmt.Errorf("kubernetes provider: %w", err)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes provider: %w", err)
		}
		if err := clearLabels(client, ns, name); err != nil {
			return nil, fmt.Errorf("kubernetes provider: clear the labels of pod %s: %w", name, err)
		}
		p, err := k8s.NewWithConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes provider: %w", err)
		}
		if adjust != nil {
			adjust(p)
		}
		return p, nil
	})
}

// clearLabels removes the labels protoactor's provider sets
// (cluster.proto.actor/*) from pod name in namespace ns, leaving the
// others: a get, then a JSON merge patch (the labels set to null) if any
// is there.
func clearLabels(client kubernetes.Interface, ns, name string) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = clearLabelsOnce(client, ns, name); err == nil || attempt == clearAttempts || !retryable(err) {
			break
		}
		time.Sleep(clearPause) // the API's own pace: nothing to wait on
	}
	return apiError(err)
}

// clearLabelsOnce is one attempt of clearLabels.
func clearLabelsOnce(client kubernetes.Interface, ns, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), clearTimeout)
	defer cancel()
	pods := client.CoreV1().Pods(ns)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	remove := map[string]any{}
	for k := range pod.Labels {
		if strings.HasPrefix(k, k8s.LabelPrefix) {
			remove[k] = nil
		}
	}
	if len(remove) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": remove}})
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// retryable reports an error the API may not repeat: no answer, a 5xx or
// a 429.
func retryable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests
	}
	return true
}

// apiError is err as it may be logged: the API's own answer (a status such
// as `pods "siftbatch-0" is forbidden: ...`), or the kind of failure
// without client-go's text, which names the API's URL.
func apiError(err error) error {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return nil
	case errors.As(err, &status):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return errors.New("the Kubernetes API did not answer in time")
	default:
		return errors.New("the Kubernetes API could not be reached")
	}
}
