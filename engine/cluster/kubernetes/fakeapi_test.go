package kubernetes

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// fakeAPI is a Kubernetes API server with one pod, speaking as much of the
// pods API as protoactor's provider and ours use: get the pod, patch its
// labels (a JSON patch or a JSON merge patch), watch the pods by a label
// selector (the pod's changes streamed as ADDED, MODIFIED and DELETED as
// it comes to match the selector, changes or stops matching).
type fakeAPI struct {
	t   testing.TB
	srv *httptest.Server

	mu      sync.Mutex
	pod     *corev1.Pod
	history []map[string]string // the pod's labels after each patch
	changed chan struct{}       // closed at the pod's next change
	getCode int                 // if not 0, a GET of the pod answers this status
	done    chan struct{}       // closed by close: ends the watches
}

// podPath is a pod's path or the pods' (a watch), with or without a
// namespace.
var podPath = regexp.MustCompile(`^/api/v1/(?:namespaces/([^/]+)/)?pods(?:/([^/]+))?$`)

// newFakeAPI serves pod until the test ends.
func newFakeAPI(t testing.TB, pod *corev1.Pod) *fakeAPI {
	f := &fakeAPI{t: t, pod: pod.DeepCopy(), changed: make(chan struct{}), done: make(chan struct{})}
	f.pod.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	f.pod.ResourceVersion = "1"
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.close)
	return f
}

// config is a client configuration for the fake.
func (f *fakeAPI) config() (*rest.Config, error) { return &rest.Config{Host: f.srv.URL}, nil }

// close ends the watches and stops the server.
func (f *fakeAPI) close() {
	f.mu.Lock()
	select {
	case <-f.done:
	default:
		close(f.done)
	}
	f.mu.Unlock()
	f.srv.Close()
}

// state returns a copy of the pod and a channel closed at its next change.
func (f *fakeAPI) state() (*corev1.Pod, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pod.DeepCopy(), f.changed
}

// patched returns the pod's labels after each patch so far.
func (f *fakeAPI) patched() []map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]string(nil), f.history...)
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	m := podPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		f.status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no such path")
		return
	}
	ns, name := m[1], m[2]
	f.mu.Lock()
	own := name == f.pod.Name && ns == f.pod.Namespace
	getCode := f.getCode
	f.mu.Unlock()
	switch {
	case name == "" && r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		f.watch(w, r)
	case name == "":
		f.status(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "only watches of the pods")
	case !own:
		f.status(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", name))
	case r.Method == http.MethodGet && getCode != 0:
		f.status(w, getCode, metav1.StatusReasonForbidden, fmt.Sprintf("pods %q is forbidden", name))
	case r.Method == http.MethodGet:
		f.mu.Lock()
		b, err := json.Marshal(f.pod)
		f.mu.Unlock()
		if err != nil {
			f.t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	case r.Method == http.MethodPatch:
		f.patch(w, r)
	default:
		f.status(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method)
	}
}

// status answers a failure as the API does: a Status.
func (f *fakeAPI) status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	b, _ := json.Marshal(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// patch applies a JSON patch (add, replace or remove of /metadata/labels
// or one label) or a JSON merge patch of the labels.
func (f *fakeAPI) patch(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lbls := maps.Clone(f.pod.Labels)
	if lbls == nil {
		lbls = map[string]string{}
	}
	switch types.PatchType(r.Header.Get("Content-Type")) {
	case types.JSONPatchType:
		var ops []struct {
			Op    string          `json:"op"`
			Path  string          `json:"path"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(body, &ops); err != nil {
			f.t.Errorf("fake API: JSON patch %s: %v", body, err)
		}
		for _, op := range ops {
			switch {
			case op.Path == "/metadata/labels" && (op.Op == "replace" || op.Op == "add"):
				lbls = map[string]string{}
				if err := json.Unmarshal(op.Value, &lbls); err != nil {
					f.t.Errorf("fake API: JSON patch %s: %v", body, err)
				}
			case strings.HasPrefix(op.Path, "/metadata/labels/") && op.Op == "remove":
				key := strings.NewReplacer("~1", "/", "~0", "~").Replace(strings.TrimPrefix(op.Path, "/metadata/labels/"))
				delete(lbls, key)
			default:
				f.t.Errorf("fake API: JSON patch op %s %s: not spoken here", op.Op, op.Path)
			}
		}
	case types.MergePatchType, types.StrategicMergePatchType:
		var p struct {
			Metadata struct {
				Labels map[string]*string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			f.t.Errorf("fake API: merge patch %s: %v", body, err)
		}
		for k, v := range p.Metadata.Labels {
			if v == nil {
				delete(lbls, k)
			} else {
				lbls[k] = *v
			}
		}
	default:
		f.t.Errorf("fake API: patch of type %q", r.Header.Get("Content-Type"))
	}
	f.pod.Labels = lbls
	v, _ := strconv.Atoi(f.pod.ResourceVersion)
	f.pod.ResourceVersion = strconv.Itoa(v + 1)
	f.history = append(f.history, maps.Clone(lbls))
	close(f.changed)
	f.changed = make(chan struct{})
	b, err := json.Marshal(f.pod)
	if err != nil {
		f.t.Error(err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// watch streams the pod's events for the request's label selector until
// the client goes or the fake closes.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request) {
	sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		f.status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "bad selector")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	matched := false
	for {
		pod, changed := f.state()
		match := sel.Matches(labels.Set(pod.Labels))
		typ := ""
		switch {
		case match && !matched:
			typ = "ADDED"
		case match:
			typ = "MODIFIED"
		case matched:
			typ = "DELETED"
		}
		matched = match
		if typ != "" {
			if err := enc.Encode(map[string]any{"type": typ, "object": pod}); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-f.done:
			return
		}
	}
}

// update changes the pod (its status, say) as the kubelet would, and
// tells the watches.
func (f *fakeAPI) update(change func(*corev1.Pod)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.pod)
	v, _ := strconv.Atoi(f.pod.ResourceVersion)
	f.pod.ResourceVersion = strconv.Itoa(v + 1)
	close(f.changed)
	f.changed = make(chan struct{})
}
