package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sift/batch/cmd/siftbatch/internal/clusterflags"
	"github.com/sift/batch/cmd/siftbatch/internal/health"
	"github.com/sift/batch/cmd/siftbatch/internal/servecmd"
	"github.com/sift/batch/engine"
)

// k8sDir holds the manifests of a siftbatch cluster on Kubernetes.
const k8sDir = "../../docs/k8s"

// providerRBAC is what protoactor-go's Kubernetes provider
// (cluster/clusterproviders/k8s/k8s_provider.go, at go.mod's version) asks
// the API for, all in its own namespace, on pods of the core group:
//
//	registerMember, deregisterMember: CoreV1().Pods(ns).Get(own pod)   get
//	replacePodLabels:                 CoreV1().Pods(ns).Patch(own pod) patch
//	watchPods:                        CoreV1().Pods(ns).Watch(cluster) watch
//
// It never lists (the watch's first events are the pods already there).
var providerRBAC = map[string][]string{"pods": {"get", "patch", "watch"}}

// providerLabelPrefix begins the labels the provider sets on its pod and
// removes on a graceful stop (LabelPrefix in the provider's labels.go):
// no selector may use them.
const providerLabelPrefix = "cluster.proto.actor/"

// Sample values of the downward API's fields, for the container's args.
var k8sSampleFields = map[string]string{"metadata.name": "siftbatch-0", "status.podIP": "10.0.0.7"}

// k8sKinds are the kinds the manifests may hold, by "apiVersion kind".
var k8sKinds = map[string]func() any{
	"apps/v1 StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"v1 Service":                               func() any { return &corev1.Service{} },
	"v1 ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"rbac.authorization.k8s.io/v1 Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1 RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"networking.k8s.io/v1 NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
}

// k8sObjects are the manifests' objects, by kind.
type k8sObjects struct {
	statefulSets    []*appsv1.StatefulSet
	services        map[string]*corev1.Service
	serviceAccounts map[string]*corev1.ServiceAccount
	roles           map[string]*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
	networkPolicies []*networkingv1.NetworkPolicy
}

// loadK8sManifests decodes every document of the files kustomization.yaml
// lists, strictly (a misspelt or unknown field fails), into its kind's
// Kubernetes API type.
func loadK8sManifests(t *testing.T) k8sObjects {
	t.Helper()
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &kust); err != nil || kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: want a Kustomization of resources only (%v)", err)
	}
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			want = append(want, base)
		}
	}
	if got := slices.Sorted(slices.Values(kust.Resources)); !slices.Equal(got, want) {
		t.Fatalf("kustomization.yaml lists %v; the manifests are %v", got, want)
	}
	objs := k8sObjects{services: map[string]*corev1.Service{}, serviceAccounts: map[string]*corev1.ServiceAccount{}, roles: map[string]*rbacv1.Role{}}
	seen := map[string]bool{}
	for _, name := range want {
		f, err := os.Open(filepath.Join(k8sDir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", name, i, err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: document %d: %v", name, i, err)
			}
			if tm == (metav1.TypeMeta{}) {
				if js, err := yaml.YAMLToJSON(doc); err != nil || string(bytes.TrimSpace(js)) != "null" {
					t.Fatalf("%s: document %d has no apiVersion and kind", name, i)
				}
				continue // comments only
			}
			newObj, ok := k8sKinds[tm.APIVersion+" "+tm.Kind]
			if !ok {
				t.Fatalf("%s: document %d: %s %s is not a kind this test knows: add it", name, i, tm.APIVersion, tm.Kind)
			}
			obj := newObj()
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: document %d (%s): %v", name, i, tm.Kind, err)
			}
			var meta metav1.ObjectMeta
			switch o := obj.(type) {
			case *appsv1.StatefulSet:
				meta = o.ObjectMeta
				objs.statefulSets = append(objs.statefulSets, o)
			case *corev1.Service:
				meta = o.ObjectMeta
				objs.services[o.Name] = o
			case *corev1.ServiceAccount:
				meta = o.ObjectMeta
				objs.serviceAccounts[o.Name] = o
			case *rbacv1.Role:
				meta = o.ObjectMeta
				objs.roles[o.Name] = o
			case *rbacv1.RoleBinding:
				meta = o.ObjectMeta
				objs.roleBindings = append(objs.roleBindings, o)
			case *networkingv1.NetworkPolicy:
				meta = o.ObjectMeta
				objs.networkPolicies = append(objs.networkPolicies, o)
			}
			if errs := validation.IsDNS1123Subdomain(meta.Name); len(errs) > 0 || meta.Namespace != "" {
				t.Errorf("%s: %s %q: want a name (%v) and no namespace (kubectl apply -n chooses it)", name, tm.Kind, meta.Name, errs)
			}
			for k, v := range meta.Labels {
				if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
					t.Errorf("%s: %s %s: label %s=%s: %v", name, tm.Kind, meta.Name, k, v, errs)
				}
			}
			if key := tm.Kind + "/" + meta.Name; seen[key] {
				t.Errorf("%s: %s twice", name, key)
			} else {
				seen[key] = true
			}
		}
	}
	return objs
}

// expandK8sArgs expands $(VAR) in args as the kubelet does, from the
// container's env: a downward-API field takes its sample value, a plain
// value itself.
func expandK8sArgs(t *testing.T, c corev1.Container) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v, ok := k8sSampleFields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("env %s: no sample value for the field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		}
	}
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		for name, v := range env {
			a = strings.ReplaceAll(a, "$("+name+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Fatalf("arg %q: a $(VAR) that is not in the container's env", c.Args[i])
		}
		out[i] = a
	}
	return out
}

// containerPort is the number of the container's port p names (its name or
// its number).
func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return int(cp.ContainerPort)
		}
	}
	t.Fatalf("port %s is not a port of container %s", p.String(), c.Name)
	return 0
}

// addrPort is the port of a HOST:PORT flag.
func addrPort(t *testing.T, flag, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", flag, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: %v", flag, addr, err)
	}
	return n
}

// TestK8sManifests checks docs/k8s/ against serve: the manifests decode
// into their kinds strictly; the container's args, the pod's name and IP
// filled in, are accepted by serve's own flag parsing and checks; ports,
// probes, volumes, keys, the cluster's certificates and RBAC agree with
// those flags and with what the Kubernetes provider does. Nothing is
// applied to a cluster.
func TestK8sManifests(t *testing.T) {
	t.Parallel()
	objs := loadK8sManifests(t)
	if len(objs.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets; want 1", len(objs.statefulSets))
	}
	sts := objs.statefulSets[0]
	pod := sts.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// serve's flags, as the kubelet passes them to the image's entrypoint.
	args := expandK8sArgs(t, c)
	if len(c.Command) != 0 || len(args) == 0 || args[0] != "serve" {
		t.Fatalf("command %q, args %q: want the image's entrypoint with args serve ...", c.Command, args)
	}
	f, err := servecmd.Parse(args[1:], io.Discard)
	if err != nil {
		t.Fatalf("serve refuses the manifest's args %q: %v", args[1:], err)
	}
	if f.Config.Durability != engine.DurabilitySync || f.Data == "" {
		t.Errorf("durability %s, --data %q: want --durable on a volume", f.Config.Durability, f.Data)
	}
	if f.Cluster.Name == "" || f.Cluster.Provider != clusterflags.ProviderK8s {
		t.Errorf("--cluster %q --cluster-provider %q: want a cluster, provider %s", f.Cluster.Name, f.Cluster.Provider, clusterflags.ProviderK8s)
	}

	t.Run("pod identity", func(t *testing.T) {
		// The provider looks its own pod up by os.Hostname(), the pod's
		// name unless the spec renames the host; the node's name must be
		// the pod's too (stable across restarts).
		if f.Cluster.Node != k8sSampleFields["metadata.name"] {
			t.Errorf("--node %q: want the pod's name, $(POD_NAME) from metadata.name", f.Cluster.Node)
		}
		if pod.Spec.Hostname != "" || pod.Spec.HostNetwork || pod.Spec.SetHostnameAsFQDN != nil && *pod.Spec.SetHostnameAsFQDN {
			t.Errorf("hostname %q, hostNetwork %v, setHostnameAsFQDN %v: the provider finds its pod by the hostname, which must be the pod's name",
				pod.Spec.Hostname, pod.Spec.HostNetwork, pod.Spec.SetHostnameAsFQDN)
		}
		// The provider makes each member's address from the pod's IP
		// (status.podIP) and the port it labels the pod with, its own
		// advertised port: --advertise-addr must be exactly those.
		host, _, _ := net.SplitHostPort(f.Cluster.Advertise)
		if host != k8sSampleFields["status.podIP"] {
			t.Errorf("--advertise-addr %q: want $(POD_IP):PORT, POD_IP from status.podIP", f.Cluster.Advertise)
		}
	})

	t.Run("ports", func(t *testing.T) {
		http := containerPort(t, c, intstr.FromString("http"))
		clusterPort := containerPort(t, c, intstr.FromString("cluster"))
		if got := addrPort(t, "--addr", f.Addr); got != http {
			t.Errorf("--addr %q: want the container's http port %d", f.Addr, http)
		}
		if got := addrPort(t, "--cluster-addr", f.Cluster.Addr); got != clusterPort {
			t.Errorf("--cluster-addr %q: want the container's cluster port %d", f.Cluster.Addr, clusterPort)
		}
		if got := addrPort(t, "--advertise-addr", f.Cluster.Advertise); got != clusterPort {
			t.Errorf("--advertise-addr %q: want the container's cluster port %d", f.Cluster.Advertise, clusterPort)
		}
		headless, ok := objs.services[sts.Spec.ServiceName]
		if !ok || headless.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Fatalf("serviceName %q: want a headless Service (clusterIP: None) of that name", sts.Spec.ServiceName)
		}
		var api []*corev1.Service
		for _, s := range objs.services {
			if s != headless {
				api = append(api, s)
			}
		}
		if len(api) != 1 || api[0].Spec.ClusterIP == corev1.ClusterIPNone {
			t.Fatalf("want one Service with a cluster IP for the HTTP API beside the headless one")
		}
		targets := func(s *corev1.Service) []int {
			var out []int
			for _, p := range s.Spec.Ports {
				out = append(out, containerPort(t, c, p.TargetPort))
			}
			return out
		}
		if got := targets(headless); !slices.Equal(got, []int{clusterPort}) {
			t.Errorf("Service %s targets ports %v; want the cluster port %d", headless.Name, got, clusterPort)
		}
		if got := targets(api[0]); !slices.Equal(got, []int{http}) {
			t.Errorf("Service %s targets ports %v; want the HTTP port %d only", api[0].Name, got, http)
		}
		for _, np := range objs.networkPolicies {
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port == nil {
						t.Fatalf("NetworkPolicy %s: a rule for every port", np.Name)
					}
					got := containerPort(t, c, *p.Port)
					// The cluster port is open to the nodes only.
					if got == clusterPort && (len(rule.From) != 1 || rule.From[0].PodSelector == nil ||
						!labels.SelectorFromSet(rule.From[0].PodSelector.MatchLabels).Matches(labels.Set(pod.Labels))) {
						t.Errorf("NetworkPolicy %s: the cluster port must be open to the siftbatch pods only", np.Name)
					}
				}
			}
		}
	})

	t.Run("selectors", func(t *testing.T) {
		sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			t.Fatalf("the StatefulSet's selector %v does not match its template's labels %v (%v)", sts.Spec.Selector, pod.Labels, err)
		}
		for _, s := range objs.services {
			if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Errorf("Service %s: selector %v does not match the pods' labels %v", s.Name, s.Spec.Selector, pod.Labels)
			}
		}
		for _, np := range objs.networkPolicies {
			if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(pod.Labels)) {
				t.Errorf("NetworkPolicy %s: podSelector %v does not match the pods' labels", np.Name, np.Spec.PodSelector.MatchLabels)
			}
		}
		// The provider sets its labels on the pod and removes them when
		// the node stops: a selector on them would lose the pod.
		all := slices.Collect(maps.Keys(pod.Labels))
		all = append(all, slices.Collect(maps.Keys(sts.Spec.Selector.MatchLabels))...)
		for _, s := range objs.services {
			all = append(all, slices.Collect(maps.Keys(s.Spec.Selector))...)
		}
		for _, k := range all {
			if strings.HasPrefix(k, providerLabelPrefix) {
				t.Errorf("label %s: the provider's own (%s*), set and removed by it", k, providerLabelPrefix)
			}
		}
	})

	t.Run("names", func(t *testing.T) {
		// What the API server would refuse: a container or port name that
		// is not a DNS label or an IANA service name, a bad label.
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			t.Errorf("container %q: %v", c.Name, errs)
		}
		for _, p := range c.Ports {
			if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
				t.Errorf("port %q: %v", p.Name, errs)
			}
		}
		for k, v := range pod.Labels {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Errorf("pod label %s=%s: %v", k, v, errs)
			}
		}
	})

	t.Run("env", func(t *testing.T) {
		want := map[string]string{"POD_NAME": "metadata.name", "POD_IP": "status.podIP"}
		for _, e := range c.Env {
			if path, ok := want[e.Name]; ok && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == path {
				delete(want, e.Name)
			}
		}
		if len(want) > 0 {
			t.Errorf("env lacks the downward API's %v", want)
		}
	})

	t.Run("probes", func(t *testing.T) {
		// Readiness (and startup) on /healthz alone: the provider counts a
		// pod as a member only once it is ready, so a probe that asked
		// about membership would keep every pod out. Liveness on
		// /healthz?cluster=1, which also fails once the node has been out
		// of its own member list for long (its member id blocked for good):
		// the restart labels a new one.
		http := containerPort(t, c, intstr.FromString("http"))
		livePath := "/healthz?" + health.ClusterParam + "=1"
		for name, want := range map[string]struct {
			p    *corev1.Probe
			path string
		}{
			"readinessProbe": {c.ReadinessProbe, "/healthz"},
			"startupProbe":   {c.StartupProbe, "/healthz"},
			"livenessProbe":  {c.LivenessProbe, livePath},
		} {
			p := want.p
			if p == nil {
				if name != "startupProbe" {
					t.Errorf("no %s", name)
				}
				continue
			}
			g := p.HTTPGet
			if g == nil || g.Path != want.path || containerPort(t, c, g.Port) != http || g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
				t.Errorf("%s: want GET %s on the HTTP port %d over HTTP", name, want.path, http)
			}
		}
		// The liveness probe restarts a node out of its member list for
		// servecmd's memberGrace, then failureThreshold periods: bounded; and it
		// fails no sooner than readiness does on a slow answer.
		if l, r := c.LivenessProbe, c.ReadinessProbe; l != nil && r != nil &&
			(l.FailureThreshold*l.PeriodSeconds < r.FailureThreshold*r.PeriodSeconds || l.TimeoutSeconds < r.TimeoutSeconds) {
			t.Errorf("livenessProbe fails sooner than readinessProbe: a slow node would be restarted before it is taken out")
		}
	})

	t.Run("data volume", func(t *testing.T) {
		var claim *corev1.PersistentVolumeClaim
		for _, m := range c.VolumeMounts {
			if m.MountPath != f.Data {
				continue
			}
			for i := range sts.Spec.VolumeClaimTemplates {
				if sts.Spec.VolumeClaimTemplates[i].Name == m.Name {
					claim = &sts.Spec.VolumeClaimTemplates[i]
				}
			}
		}
		if claim == nil {
			t.Fatalf("--data %q is not the mount of a volumeClaimTemplate (each pod its own volume)", f.Data)
		}
		if size := claim.Spec.Resources.Requests[corev1.ResourceStorage]; size.Sign() <= 0 || !slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOnce) {
			t.Errorf("claim %s: want ReadWriteOnce and a storage request (got %v, %v)", claim.Name, claim.Spec.AccessModes, size.String())
		}
	})

	t.Run("keys", func(t *testing.T) {
		volumes := map[string]corev1.Volume{}
		for _, v := range pod.Spec.Volumes {
			volumes[v.Name] = v
		}
		found := false
		for _, m := range c.VolumeMounts {
			v, ok := volumes[m.Name]
			if !ok || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if filepath.Join(m.MountPath, it.Path) != f.Keys {
					continue
				}
				found = true
				if !m.ReadOnly || v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440 {
					t.Errorf("the keys' mount: want read-only, mode 0440 (readable by the pod's fsGroup only)")
				}
			}
		}
		if !found {
			t.Errorf("--keys %q is not a file of a mounted Secret", f.Keys)
		}
	})

	t.Run("cluster TLS", func(t *testing.T) {
		// Mutual TLS, never --cluster-insecure: the CA and the pod's own
		// certificate and key, each pod's picked by its name from one
		// mounted Secret.
		if f.Cluster.Insecure || f.Cluster.CA == "" || f.Cluster.Cert == "" || f.Cluster.Key == "" {
			t.Fatalf("--cluster-insecure %v, --cluster-ca %q, --cluster-cert %q, --cluster-key %q: want mutual TLS",
				f.Cluster.Insecure, f.Cluster.CA, f.Cluster.Cert, f.Cluster.Key)
		}
		podName := k8sSampleFields["metadata.name"]
		if filepath.Base(f.Cluster.Cert) != podName+".crt" || filepath.Base(f.Cluster.Key) != podName+".key" {
			t.Errorf("--cluster-cert %q, --cluster-key %q: want the pod's own, $(POD_NAME).crt and $(POD_NAME).key", f.Cluster.Cert, f.Cluster.Key)
		}
		volumes := map[string]corev1.Volume{}
		for _, v := range pod.Spec.Volumes {
			volumes[v.Name] = v
		}
		var mount *corev1.VolumeMount
		for i, m := range c.VolumeMounts {
			if m.MountPath == filepath.Dir(f.Cluster.CA) {
				mount = &c.VolumeMounts[i]
			}
			for _, o := range c.VolumeMounts {
				if o.MountPath != m.MountPath && strings.HasPrefix(o.MountPath+"/", m.MountPath+"/") {
					t.Errorf("mount %s is inside mount %s", o.MountPath, m.MountPath)
				}
			}
		}
		if mount == nil {
			t.Fatalf("--cluster-ca %q is not in a mounted volume", f.Cluster.CA)
		}
		for flag, file := range map[string]string{"--cluster-cert": f.Cluster.Cert, "--cluster-key": f.Cluster.Key} {
			if filepath.Dir(file) != mount.MountPath {
				t.Errorf("%s %q: want it beside --cluster-ca, in %s", flag, file, mount.MountPath)
			}
		}
		v := volumes[mount.Name].Secret
		if v == nil || v.SecretName == "" {
			t.Fatalf("the volume at %s is not a Secret's", mount.MountPath)
		}
		// Every key of the Secret, so that each pod finds its own pair;
		// required (a pod without its pair must not start), read-only,
		// readable by the pod's group only.
		if len(v.Items) != 0 || v.Optional != nil && *v.Optional {
			t.Errorf("Secret %s: want every key mounted (no items), not optional", v.SecretName)
		}
		if !mount.ReadOnly || v.DefaultMode == nil || *v.DefaultMode != 0o440 {
			t.Errorf("the cluster TLS mount: want read-only, mode 0440 (readable by the pod's fsGroup only)")
		}
		if kv := volumes["keys"].Secret; kv != nil && kv.SecretName == v.SecretName {
			t.Errorf("the certificates share the keys' Secret %s: want their own", v.SecretName)
		}
		// The files cluster-certs makes for the pods' names are what
		// serve loads with these flags, the Secret mounted as a directory.
		certs := filepath.Join(t.TempDir(), "certs")
		pods := []string{sts.Name + "-0", sts.Name + "-1", sts.Name + "-2"}
		if !slices.Contains(pods, podName) {
			t.Fatalf("the sample pod name %s is not one of the StatefulSet's %v", podName, pods)
		}
		if _, _, err := run(t, "cluster-certs", "--dir", certs, "--nodes", strings.Join(pods, ",")); err != nil {
			t.Fatal(err)
		}
		cl := f.Cluster
		for _, p := range []*string{&cl.CA, &cl.Cert, &cl.Key} {
			*p = filepath.Join(certs, filepath.Base(*p))
		}
		conf, err := cl.LoadTLS()
		if err != nil || conf.Node() != podName {
			t.Errorf("serve's load of the mounted files: %v", err)
		}
		// The statefulset's own instructions make that Secret.
		b, err := os.ReadFile(filepath.Join(k8sDir, "statefulset.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"siftbatch cluster-certs --dir certs --nodes " + strings.Join(pods, ","),
			"kubectl create secret generic " + v.SecretName + " --from-file=certs/ca.crt",
			"--from-file=certs/" + podName + ".crt --from-file=certs/" + podName + ".key"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("statefulset.yaml's instructions lack %q", want)
			}
		}
		if bytes.Contains(b, []byte("--from-file=certs/ca.key")) {
			t.Errorf("statefulset.yaml puts the CA's key in the Secret")
		}
	})

	t.Run("rbac", func(t *testing.T) {
		sa, ok := objs.serviceAccounts[pod.Spec.ServiceAccountName]
		if !ok {
			t.Fatalf("serviceAccountName %q: no such ServiceAccount", pod.Spec.ServiceAccountName)
		}
		// The provider's in-cluster configuration and its namespace come
		// from the service account's mount.
		if sa.AutomountServiceAccountToken != nil && !*sa.AutomountServiceAccountToken ||
			pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
			t.Errorf("the service account's token must be mounted: the provider reads it")
		}
		granted := map[string][]string{}
		for _, rb := range objs.roleBindings {
			bound := false
			for _, s := range rb.Subjects {
				bound = bound || s.Kind == rbacv1.ServiceAccountKind && s.Name == sa.Name && s.Namespace == ""
			}
			role, ok := objs.roles[rb.RoleRef.Name]
			if !bound || rb.RoleRef.Kind != "Role" || rb.RoleRef.APIGroup != rbacv1.GroupName || !ok {
				continue
			}
			for _, r := range role.Rules {
				if !slices.Equal(r.APIGroups, []string{""}) || len(r.ResourceNames) > 0 {
					t.Errorf("Role %s: a rule beyond the core group's pods: %v", role.Name, r)
					continue
				}
				for _, res := range r.Resources {
					granted[res] = append(granted[res], r.Verbs...)
				}
			}
		}
		for res, verbs := range granted {
			slices.Sort(verbs)
			granted[res] = slices.Compact(verbs)
		}
		// Exactly what the provider uses: no more.
		if !maps.EqualFunc(granted, providerRBAC, slices.Equal) {
			t.Errorf("the service account is granted %v; the provider needs %v", granted, providerRBAC)
		}
	})

	t.Run("stop and resources", func(t *testing.T) {
		// A graceful stop: HTTP requests (servecmd.ShutdownTimeout), the runner's
		// fetches (engine.CloseTimeout), then the provider's two 5 s
		// requests (deregister, stop watching) as the node leaves.
		need := servecmd.ShutdownTimeout + engine.CloseTimeout + 10*time.Second
		if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < need {
			t.Errorf("terminationGracePeriodSeconds: want at least %v", need)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[r]; !ok || q.Sign() <= 0 {
				t.Errorf("no %s request", r)
			}
		}
	})

	t.Run("image", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(k8sDir, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CGO_ENABLED=0", "-tags k8s", "./cmd/siftbatch", `ENTRYPOINT ["/siftbatch"]`, "distroless/static"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("Dockerfile lacks %q", want)
			}
		}
	})
}
