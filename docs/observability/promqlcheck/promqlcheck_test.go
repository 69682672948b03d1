package promqlcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// The files checked, relative to this directory.
const (
	rulesFile   = "../alerts.yml"
	boardFile   = "../grafana-siftbatch.json"
	exposedFile = "../testdata/exposed.txt"
)

// expr is one PromQL expression and where it came from.
type expr struct {
	where, text string
}

// TestObservability_NamesExist: every expression of the alert rules and
// of the board parses, and every series it selects is one serve exposes.
func TestObservability_NamesExist(t *testing.T) {
	exposed := readExposed(t)
	exprs := append(ruleExprs(t, rulesFile), boardExprs(t, boardFile)...)
	if len(exprs) < 10 {
		t.Fatalf("found %d expressions: the files were not read right", len(exprs))
	}
	for _, e := range exprs {
		names, err := seriesNames(e.text)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no series by name", e.where, e.text)
		}
		for _, n := range names {
			if !slices.Contains(exposed, n) {
				t.Errorf("%s: %s is not a series serve exposes (%s)", e.where, n, exposedFile)
			}
		}
	}
}

// TestObservability_FindsUnknownNames: the check fails an expression that
// names a series serve does not expose, one that selects by a name
// matcher, and one that does not parse.
func TestObservability_FindsUnknownNames(t *testing.T) {
	exposed := readExposed(t)
	for _, bad := range []string{
		`rate(siftbatch_no_such_total[5m]) > 0`,
		`siftbatch_store_bytes > siftbatch_store_max_bytez`,
		`{__name__=~"siftbatch_.*"}`,
		`rate(siftbatch_jobs_total[5m]`,
	} {
		names, err := seriesNames(bad)
		unknown := slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(exposed, n) })
		if err == nil && !unknown {
			t.Errorf("%q passed the check", bad)
		}
	}
}

// seriesNames returns the metric names text selects, each once. A selector
// without a literal name (by a __name__ regexp, say) is an error: its
// series cannot be checked.
func seriesNames(text string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(text))
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			bad = fmt.Errorf("%s selects series without naming them", vs)
			return nil
		}
		if !slices.Contains(names, vs.Name) {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, bad
}

// grafanaVars stands in for the board's variables, which are not PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func readExposed(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(exposedFile)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(b))
	if len(names) < 20 {
		t.Fatalf("%s lists %d names", exposedFile, len(names))
	}
	return names
}

// ruleExprs returns the expr of every rule of a Prometheus rule file.
func ruleExprs(t *testing.T, path string) []expr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []expr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, expr{fmt.Sprintf("%s: %s", filepath.Base(path), r.Alert+r.Record), r.Expr})
		}
	}
	return out
}

// boardExprs returns the expr of every target of every panel (rows'
// panels too) of a Grafana dashboard, and of every query variable.
func boardExprs(t *testing.T, path string) []expr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var board struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &board); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []expr
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for i, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("%s: panel %q target %d has no expr", path, p.Title, i)
				}
				out = append(out, expr{fmt.Sprintf("%s: panel %q target %d", filepath.Base(path), p.Title, i), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(board.Panels)
	for _, v := range board.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		// label_values(METRIC, LABEL): Grafana's, not PromQL; its metric is checked.
		if rest, ok := strings.CutPrefix(q, "label_values("); ok {
			q, _, _ = strings.Cut(rest, ",")
		}
		out = append(out, expr{fmt.Sprintf("%s: variable %s", filepath.Base(path), v.Name), q})
	}
	return out
}

// TestObservability_EveryAlertHasARunbook: every alert's runbook
// annotation names RUNBOOK.md and a section of it headed with the alert's
// name.
func TestObservability_EveryAlertHasARunbook(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	book, err := os.ReadFile("../RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			want := "docs/observability/RUNBOOK.md#" + strings.ToLower(r.Alert)
			if got := r.Annotations["runbook"]; got != want {
				t.Errorf("%s: runbook %q, want %q", r.Alert, got, want)
			}
			if !strings.Contains(string(book), "\n## "+r.Alert+"\n") {
				t.Errorf("%s: RUNBOOK.md has no section ## %s", r.Alert, r.Alert)
			}
		}
	}
	if alerts < 8 {
		t.Errorf("%d alerts read", alerts)
	}
}
