package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sift/batch/engine/enginetest/loopback"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// exposedFile lists, one a line, the siftbatch_ series names a real serve's
// GET /metrics exposes (a histogram's _bucket, _sum and _count each): what
// the alert rules and the Grafana board of docs/observability/ may name.
// TestServe_MetricsExposed keeps it true; the module in
// docs/observability/promqlcheck parses every expression of the rules and
// the board with Prometheus's own PromQL parser and fails on a name it
// does not list (make test/rules runs it).
const exposedFile = "../../docs/observability/testdata/exposed.txt"

var updateExposed = flag.Bool("update-exposed", false, "rewrite "+exposedFile+" from a real serve's /metrics")

// TestServe_MetricsExposed starts a real serve as a one-node cluster
// (--cluster: a cluster node has every series a single node has, and its
// own), scrapes its GET /metrics and checks that the siftbatch_ series
// names are exactly those of exposedFile: a series that disappears, or
// one added without the file (run with -update-exposed), fails it.
//
// A vector's series appear only once a label set exists: each is created
// at zero by the metrics package (job outcomes, target results, refusal
// reasons, filter death reasons, each route's latency), except the
// request counter's {route,code}, which exists once a request has been
// answered: the test asks GET /healthz before it scrapes.
func TestServe_MetricsExposed(t *testing.T) {
	t.Parallel()
	testkit.Long(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("alice "+clusterAlice+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	apis, manages := nodePorts(t, 1)
	api, manage := apis[0].Addr(), manages[0].Addr()
	n := startClusterNode(t, "n1", "http://"+api, []*loopback.Port{apis[0], manages[0]}, "--keys", keys, "--data", "", "--addr", api,
		"--cluster", "siftbatch-metrics", "--node", "n1", "--cluster-addr", "127.0.0.1:0",
		"--manage-addr", manage, "--peers", manage, "--cluster-insecure")
	client := &http.Client{Timeout: 10 * time.Second}
	testkit.WaitFor(t, "serve to answer /healthz", func() bool {
		resp, err := client.Get(n.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err := client.Get(n.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	got, err := seriesNames(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if *updateExposed {
		if err := os.WriteFile(exposedFile, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(exposedFile)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(b))
	for _, name := range got {
		if !slices.Contains(want, name) {
			t.Errorf("serve exposes %s, which %s does not list (go test -run TestServe_MetricsExposed ./cmd/siftbatch -args -update-exposed)", name, exposedFile)
		}
	}
	for _, name := range want {
		if !slices.Contains(got, name) {
			t.Errorf("%s lists %s, which serve does not expose", exposedFile, name)
		}
	}
}

// seriesNames returns the sorted siftbatch_ series names of a scrape in
// Prometheus's text format: a histogram's family gives its _bucket, _sum
// and _count, a summary's its own name, _sum and _count.
func seriesNames(r io.Reader) ([]string, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse scrape: %w", err)
	}
	var names []string
	for name, f := range families {
		if !strings.HasPrefix(name, "siftbatch_") || len(f.GetMetric()) == 0 {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names = append(names, name+"_bucket", name+"_sum", name+"_count")
		case dto.MetricType_SUMMARY:
			names = append(names, name, name+"_sum", name+"_count")
		default:
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}
