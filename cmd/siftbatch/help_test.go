package main

import (
	"bytes"
	"errors"
	"io"
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
		"submit":        {"server", "key-file", "json", "grep", "jq", "targets", "idempotency-key"},
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
