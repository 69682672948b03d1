package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// testCluster is the cluster's name in these tests.
const testCluster = "siftbatch"

// testNamespace is the fake API's pod's namespace.
const testNamespace = "siftbatch-test"

// testPod names this node's pod in the tests: the hostname, as protoactor's
// provider finds it, in testNamespace.
func testPod() (string, string, error) {
	name, err := os.Hostname()
	return name, testNamespace, err
}

// inTestNamespace sets protoactor's provider's namespace to testNamespace:
// it reads it from the service account's mount, which a test has not, and
// has no option to set it (the field is unexported: set through reflect).
func inTestNamespace(p *k8s.Provider) {
	f := reflect.ValueOf(p).Elem().FieldByName("namespace")
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().SetString(testNamespace)
}

// testProvider is our provider, against api.
func testProvider(api *fakeAPI) cluster.Provider {
	return newProvider(api.config, testPod, inTestNamespace)
}

// ownTestPod is this node's pod as the fake API holds it: named and in the
// namespace protoactor's provider looks for, running and ready at
// 127.0.0.1, with labels.
func ownTestPod(t *testing.T, lbls map[string]string) *corev1.Pod {
	t.Helper()
	name, ns, err := testPod()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: "pod-uid-1", Labels: lbls},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "siftbatch", Ready: true}}},
	}
}

// startNode starts a node named name of testCluster with provider p, its
// runner on an in-memory store; all closed when the test ends.
func startNode(t *testing.T, name string, p cluster.Provider) (*cluster.Node, error) {
	t.Helper()
	return startNodeLogging(t, name, p, nil)
}

// startNodeLogging is startNode, the node logging to log.
func startNodeLogging(t *testing.T, name string, p cluster.Provider, log *slog.Logger) (*cluster.Node, error) {
	t.Helper()
	n, err := cluster.New(cluster.Config{Name: testCluster, Node: name, Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, name), Provider: p,
		Timeout: 3 * time.Second, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{}, errors.New("no fetch here")
	}
	r, err := engine.New(store, fetch, engine.Config{NodeTag: n.Tag(), Admission: n.Admission()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if err := n.Start(r, http.NotFoundHandler()); err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = n.Close() })
	return n, nil
}

// providerLabels returns the labels of lbls protoactor's provider sets.
func providerLabels(lbls map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range lbls {
		if strings.HasPrefix(k, k8s.LabelPrefix) {
			out[k] = v
		}
	}
	return out
}

// TestProvider_NewMemberIDAfterCrash: a pod that still has the labels of
// a run that did not stop gracefully (a crash the kubelet restarted in
// place), its member id blocked by every node since that run left, gets a
// new member id, and the node is a member of its own list; after a
// graceful stop, the provider's labels are gone and the pod's own kept.
// Against a fake Kubernetes API, with protoactor's own provider.
func TestProvider_NewMemberIDAfterCrash(t *testing.T) {
	const stale = "0123456789abcdef0123456789abcdef"
	api := newFakeAPI(t, ownTestPod(t, map[string]string{
		"app.kubernetes.io/name": "siftbatch",
		k8s.LabelCluster:         testCluster,
		k8s.LabelPort:            "7000",
		k8s.LabelMemberID:        stale,
		k8s.LabelKind + "-gone":  "true",
	}))
	n, err := startNode(t, "siftbatch-0", testProvider(api))
	if err != nil {
		t.Fatal(err)
	}
	// protoactor's provider labels the pod, then hears of it from its watch:
	// wait until the node is in its own member list.
	deadline := time.After(20 * time.Second)
	for !n.Membership().Member {
		select {
		case <-n.Changed():
		case <-deadline:
			pod, _ := api.state()
			t.Fatalf("the node is not in its own member list; the pod's labels %v", pod.Labels)
		}
	}
	pod, _ := api.state()
	id := pod.Labels[k8s.LabelMemberID]
	if id == "" || id == stale {
		t.Fatalf("member id %q; want a new one", id)
	}
	if got := n.Members(); !slices.Equal(got, []string{"siftbatch-0"}) {
		t.Errorf("members %v; want the node itself, once", got)
	}
	// Our provider cleared the provider's labels, and only those, before
	// protoactor's labelled the pod.
	history := api.patched()
	if len(history) < 2 {
		t.Fatalf("patches %v; want ours, then the provider's", history)
	}
	if got := history[0]; len(got) != 1 || got["app.kubernetes.io/name"] != "siftbatch" {
		t.Errorf("after the first patch, labels %v; want only the pod's own", got)
	}
	if _, gone := history[1][k8s.LabelKind+"-gone"]; gone {
		t.Errorf("the previous run's kind label survived: %v", history[1])
	}

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	pod, _ = api.state()
	if got := providerLabels(pod.Labels); len(got) != 0 || pod.Labels["app.kubernetes.io/name"] != "siftbatch" {
		t.Errorf("after a graceful stop, labels %v; want the pod's own only", pod.Labels)
	}
}

// TestProvider_NoStaleLabels: a pod without the provider's labels (a new
// pod, or a graceful stop before) is not patched before the provider
// labels it.
func TestProvider_NoStaleLabels(t *testing.T) {
	api := newFakeAPI(t, ownTestPod(t, map[string]string{"app.kubernetes.io/name": "siftbatch"}))
	n, err := startNode(t, "siftbatch-0", testProvider(api))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for !n.Membership().Member {
		select {
		case <-n.Changed():
		case <-deadline:
			t.Fatal("the node is not in its own member list")
		}
	}
	if history := api.patched(); len(history) == 0 || history[0][k8s.LabelMemberID] == "" {
		t.Errorf("patches %v; want the provider's first", history)
	}
}

// TestProvider_StartFails: the node does not start if the labels cannot be
// cleared: the pod not found (the hostname is not the pod's name), the
// Role missing. The error names the pod, never the API's URL.
func TestProvider_StartFails(t *testing.T) {
	for _, c := range []struct {
		name    string
		pod     func() (string, string, error)
		getCode int
		want    string
	}{
		{"no such pod", func() (string, string, error) { return "not-this-pod", testNamespace, nil }, 0, "not found"},
		{"forbidden", testPod, http.StatusForbidden, "forbidden"},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := newFakeAPI(t, ownTestPod(t, map[string]string{k8s.LabelMemberID: "old"}))
			api.mu.Lock()
			api.getCode = c.getCode
			api.mu.Unlock()
			_, err := startNode(t, "siftbatch-0", newProvider(api.config, c.pod, inTestNamespace))
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), api.srv.URL) ||
				strings.Contains(err.Error(), strings.TrimPrefix(api.srv.URL, "http://")) {
				t.Fatalf("Start: %v; want an error saying %q, without the API's address", err, c.want)
			}
			if got := api.patched(); len(got) != 0 {
				t.Errorf("patched %v", got)
			}
		})
	}
	// No answer at all: the API is down.
	api := newFakeAPI(t, ownTestPod(t, nil))
	api.close()
	defer func(p time.Duration) { clearPause = p }(clearPause)
	clearPause = 0
	cfg, _ := api.config()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = clearLabels(client, testNamespace, "siftbatch-0")
	if err == nil || strings.Contains(err.Error(), strings.TrimPrefix(api.srv.URL, "http://")) {
		t.Fatalf("clear with the API down: %v; want an error without its address", err)
	}
}

// TestOwnPod: the pod's name is the hostname and its namespace the service
// account mount's; without the mount, an error (protoactor's provider would
// ask for its pod in no namespace for good).
func TestOwnPod(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	name, ns, err := ownPod()
	if _, statErr := os.Stat(namespaceFile); statErr != nil {
		if err == nil || !strings.Contains(err.Error(), "namespace") {
			t.Fatalf("ownPod without a service account mount: %q %q %v; want an error", name, ns, err)
		}
		return
	}
	if err != nil || name != host || ns == "" {
		t.Fatalf("ownPod: %q %q %v; want %q in the mount's namespace", name, ns, err, host)
	}
}

// waitMembership waits until n's membership satisfies ok, failing the test
// after testkit.Deadline.
func waitMembership(t *testing.T, n *cluster.Node, what string, ok func(cluster.Membership) bool) cluster.Membership {
	t.Helper()
	deadline := time.After(testkit.Deadline)
	for {
		changed := n.Changed()
		if m := n.Membership(); ok(m) {
			return m
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s: membership %+v", what, n.Membership())
		}
	}
}

// TestProvider_UnreadyThenReady: a pod that goes unready, then ready
// again, stays out of its own member list (protoactor blocks its member id
// for good) and its Membership says since when, which serve's
// /healthz?cluster=1 turns into a failed liveness probe; the next run, on
// the same pod with the labels a killed run leaves, is a member again
// under a new member id.
func TestProvider_UnreadyThenReady(t *testing.T) {
	api := newFakeAPI(t, ownTestPod(t, map[string]string{"app.kubernetes.io/name": "siftbatch"}))
	lines := &lineCounter{changed: make(chan struct{})}
	n, err := startNodeLogging(t, "siftbatch-0", testProvider(api), slog.New(lines))
	if err != nil {
		t.Fatal(err)
	}
	joined := waitMembership(t, n, "join", func(m cluster.Membership) bool { return m.Member })
	pod, _ := api.state()
	first := pod.Labels[k8s.LabelMemberID]

	setReady := func(ready bool) {
		api.update(func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Ready = ready })
	}
	setReady(false)
	out := waitMembership(t, n, "unready", func(m cluster.Membership) bool { return !m.Member })
	if !out.Joined || !out.Since.After(joined.Since) && !out.Since.Equal(joined.Since) {
		t.Fatalf("out: %+v after %+v", out, joined)
	}
	// The watch's event for the ready pod reaches the node as a topology
	// without it (its id blocked): it stays out, since the same time. The
	// provider logs each event's topology before it hands it over, in turn:
	// once a later event's is logged, the ready pod's has been handed over.
	// (The fake API sends one event for changes that come together: one
	// change at a time.)
	seen := lines.count(topologyLine)
	setReady(true)
	lines.wait(t, topologyLine, seen+1)
	api.update(func(p *corev1.Pod) { p.Annotations = map[string]string{"touched": "yes"} })
	lines.wait(t, topologyLine, seen+2)
	if got := n.Membership(); got != out {
		t.Fatalf("ready again: %+v; want still out, as %+v", got, out)
	}

	// The kubelet restarts the container: the old run is killed (its labels
	// stay), a new one starts on the same pod.
	killed, _ := api.state()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	api.update(func(p *corev1.Pod) { p.Labels = killed.Labels })
	n2, err := startNode(t, "siftbatch-0", testProvider(api))
	if err != nil {
		t.Fatal(err)
	}
	waitMembership(t, n2, "rejoin", func(m cluster.Membership) bool { return m.Member })
	pod, _ = api.state()
	if id := pod.Labels[k8s.LabelMemberID]; id == "" || id == first {
		t.Fatalf("member id after the restart %q; want a new one (was %q)", id, first)
	}
}

// topologyLine is the line protoactor's Kubernetes provider logs for each
// pod event, before it hands the topology to the member list.
const topologyLine = "Topology received from Kubernetes"

// lineCounter is a slog.Handler that counts the lines by message.
type lineCounter struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{} // closed at the next line
}

func (l *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *lineCounter) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lineCounter) WithGroup(string) slog.Handler            { return l }

func (l *lineCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[r.Message]++
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// count returns how many lines said msg.
func (l *lineCounter) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[msg]
}

// wait waits until at least n lines said msg.
func (l *lineCounter) wait(t *testing.T, msg string, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		l.mu.Lock()
		got, changed := l.n[msg], l.changed
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d lines %q; want %d", got, msg, n)
		}
	}
}

// TestProvider_UnreadyThenReadyRejoinsInProcess: a pod that goes unready,
// then ready again, is out of its own member list under its blocked
// member id; the node, out for a while, makes a new incarnation in
// process (the provider made anew: the pod's labels cleared, a new member
// id labelled), and is a member again, without a restart.
func TestProvider_UnreadyThenReadyRejoinsInProcess(t *testing.T) {
	api := newFakeAPI(t, ownTestPod(t, map[string]string{"app.kubernetes.io/name": "siftbatch"}))
	lines := &lineCounter{changed: make(chan struct{})}
	n, err := startNodeLogging(t, "siftbatch-0", testProvider(api), slog.New(lines))
	if err != nil {
		t.Fatal(err)
	}
	waitMembership(t, n, "join", func(m cluster.Membership) bool { return m.Member })
	pod, _ := api.state()
	first := pod.Labels[k8s.LabelMemberID]
	api.update(func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Ready = false })
	waitMembership(t, n, "unready", func(m cluster.Membership) bool { return !m.Member })
	api.update(func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Ready = true })
	waitMembership(t, n, "a member again, in process", func(m cluster.Membership) bool { return m.Member })
	pod, _ = api.state()
	if id := pod.Labels[k8s.LabelMemberID]; id == "" || id == first {
		t.Fatalf("member id after the rejoin %q; want a new one (was %q)", id, first)
	}
	if lines.count("cluster node blocked by its peers: rejoining under a new member id") == 0 {
		t.Fatal("the node did not log its rejoin")
	}
}
