package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "help")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("help does not list %s:\n%s", c.name, out)
		}
	}
	flags := map[string][]string{
		"demo": {"jobs", "targets", "workers", "data"},
		"serve": {"addr", "data", "keys", "allow-private", "ttl", "targets-per-job", "jobs-per-caller", "jobs-total", "workers", "max-bytes", "retry-wait", "retry-for", "fetch-timeout", "max-body", "filter-memory", "max-answer-bytes", "max-queued-reads", "max-mcp-calls", "ui-session", "tls-proxy", "log-level",
			"cluster", "node", "cluster-addr", "advertise-addr", "manage-addr", "peers", "cluster-provider",
			"cluster-ca", "cluster-cert", "cluster-key", "cluster-insecure"},
		"cluster-certs": {"dir", "nodes", "hosts"},
		"jobs":          {"data"},
		"show":          {"data", "results"},
		"submit":        {"server", "key-file", "json", "grep", "jq", "targets", "idempotency-key", "no-retry"},
		"get":           {"server", "key-file", "json", "results"},
		"wait":          {"server", "key-file", "json", "timeout"},
		"ls":            {"server", "key-file", "json", "status", "limit"},
		"cancel":        {"server", "key-file", "json"},
		"mcp":           {"server", "key-file"},
	}
	for name, want := range flags {
		for _, args := range [][]string{{name, "--help"}, {"help", name}} {
			out, _, err := run(t, args...)
			if !errors.Is(err, cli.ErrHelpShown) && err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if report(err, io.Discard) != exitOK {
				t.Fatalf("%v does not exit 0", args)
			}
			if !strings.Contains(out, "Usage: siftbatch "+name) {
				t.Fatalf("%v:\n%s", args, out)
			}
			if name == "serve" { // its environment: the tracing it takes from OTEL_ variables
				for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER", "OTEL_BSP_"} {
					if !strings.Contains(out, v) {
						t.Fatalf("%v does not name %s:\n%s", args, v, out)
					}
				}
			}
			for _, f := range want {
				// Each flag has its own line with a description under it.
				i := strings.Index(out, "  -"+f)
				if i < 0 {
					t.Fatalf("%v lacks -%s:\n%s", args, f, out)
				}
				rest := strings.SplitN(out[i:], "\n", 3)
				if len(rest) < 2 || strings.TrimSpace(rest[1]) == "" {
					t.Fatalf("%v: -%s has no description:\n%s", args, f, out)
				}
			}
		}
	}
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{nil, `"siftbatch help"`},
		{[]string{"frobnicate"}, `"siftbatch help"`},
		{[]string{"help", "nope"}, `"siftbatch help"`},
		{[]string{"demo", "--nope"}, `"siftbatch demo --help"`},
		{[]string{"demo", "--jobs", "0"}, `"siftbatch demo --help"`},
		{[]string{"jobs", "extra"}, `"siftbatch jobs --help"`},
		{[]string{"serve"}, `"siftbatch serve --help"`},
		{[]string{"show"}, `"siftbatch show --help"`},
		{[]string{"submit", "https://example.com/"}, `"siftbatch submit --help"`},
		{[]string{"get", "--key-file", "k"}, `"siftbatch get --help"`},
		{[]string{"mcp"}, `"siftbatch mcp --help"`},
	} {
		_, _, err := run(t, tc.args...)
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			t.Fatalf("%v: %v, want a usage error", tc.args, err)
		}
		var msg bytes.Buffer
		if code := report(err, &msg); code != exitUsage || !strings.Contains(msg.String(), tc.hint) {
			t.Fatalf("%v: exit %d %q, want 2 and a hint naming %s", tc.args, code, msg.String(), tc.hint)
		}
	}
	// help's own --help lists the commands.
	for _, args := range [][]string{{"help", "--help"}, {"help", "-h"}, {"--help"}} {
		out, _, err := run(t, args...)
		if err != nil || !strings.Contains(out, "Commands:") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
}

// TestRun_Version: --version (and -version, version) prints the module's
// path and version, the revision (unknown in a test binary, which records
// none) and Go's version, and exits 0.
func TestRun_Version(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--version", "-version", "version"} {
		out, _, err := run(t, arg)
		if err != nil || !strings.HasPrefix(out, "siftbatch github.com/sift/batch ") || !strings.Contains(out, "\nrevision: ") || !strings.Contains(out, "\ngo: go1.") {
			t.Errorf("%s: %v\n%s", arg, err, out)
		}
	}
}

// TestReport_PrintsTheHint: an error with a hint (cli.WithHint) prints the
// error, then the hint on a line of its own, and exits 1.
func TestReport_PrintsTheHint(t *testing.T) {
	t.Parallel()
	var msg bytes.Buffer
	err := cli.WithHint(errors.New("dial tcp 127.0.0.1:9: connect: connection refused"), "hint: nothing listens at 127.0.0.1:9")
	if code := report(err, &msg); code != exitError || msg.String() != "siftbatch: dial tcp 127.0.0.1:9: connect: connection refused\nhint: nothing listens at 127.0.0.1:9\n" {
		t.Errorf("exit %d, %q", code, msg.String())
	}
}

// TestServe_DataIsAFile: serve --data FILE says --data is a file, and
// leaves the file as it was.
func TestServe_DataIsAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	file := filepath.Join(dir, "notes")
	if os.WriteFile(keys, []byte(testKeys), 0o600) != nil || os.WriteFile(file, []byte("mine"), 0o600) != nil {
		t.Fatal("write files")
	}
	_, _, err := run(t, "serve", "--keys", keys, "--data", file, "--addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "--data "+file+" is a file") {
		t.Errorf("serve --data FILE: %v", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "mine" {
		t.Errorf("the file after: %q %v", b, err)
	}
}
