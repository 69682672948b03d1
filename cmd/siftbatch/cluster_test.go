package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestServe_ClusterFlags: the cluster flags are checked before anything
// starts: a mistake is a usage error (exit 2) that names the flag, and
// creates nothing.
func TestServe_ClusterFlags(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	auto := []string{"--cluster", "c", "--node", "n1", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "127.0.0.1:7201"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"node alone", []string{"--node", "n1"}, "--node needs --cluster NAME (cluster mode is off without it)"},
		{"peers alone", []string{"--peers", "127.0.0.1:7201"}, "--peers needs --cluster NAME"},
		{"provider alone", []string{"--cluster-provider", "k8s"}, "--cluster-provider needs --cluster NAME"},
		{"advertise alone", []string{"--advertise-addr", "10.0.0.1:7101"}, "--advertise-addr needs --cluster NAME"},
		{"empty cluster", []string{"--cluster", "", "--cluster-addr", "127.0.0.1:7101"}, `--cluster must name the cluster (got "")`},
		{"empty node", []string{"--cluster", "c", "--node", "", "--cluster-addr", "127.0.0.1:7101"}, `--node must name this node (got ""`},
		{"provider", []string{"--cluster", "c", "--cluster-provider", "consul", "--cluster-addr", "127.0.0.1:7101"}, `--cluster-provider must be automanaged or k8s (got "consul")`},
		{"no cluster-addr", []string{"--cluster", "c"}, "--cluster needs --cluster-addr HOST:PORT"},
		{"cluster-addr", []string{"--cluster", "c", "--cluster-addr", "nowhere"}, `--cluster-addr "nowhere" is not HOST:PORT with a port from 1 to 65535`},
		{"cluster-addr port 0", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:0"}, `--cluster-addr "127.0.0.1:0" is not HOST:PORT`},
		{"unspecified", []string{"--cluster", "c", "--cluster-addr", "0.0.0.0:7101"}, `--cluster-addr "0.0.0.0:7101" cannot be advertised to the other nodes: give --advertise-addr`},
		{"no host", []string{"--cluster", "c", "--cluster-addr", ":7101"}, `--cluster-addr ":7101" cannot be advertised`},
		{"advertise", []string{"--cluster", "c", "--cluster-addr", "0.0.0.0:7101", "--advertise-addr", "10.0.0.1"}, `--advertise-addr "10.0.0.1" is not HOST:PORT`},
		{"same port as --addr", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:18080"}, "--cluster-addr and --addr need different ports (both are 18080)"},
		{"no manage-addr", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:7101", "--peers", "127.0.0.1:7201"}, "--cluster-provider automanaged needs --manage-addr HOST:PORT and --peers"},
		{"no peers", auto, "--cluster-provider automanaged needs --manage-addr HOST:PORT and --peers"},
		{"manage-addr", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "7201", "--peers", "127.0.0.1:7201"}, `--manage-addr "7201" is not HOST:PORT`},
		{"manage port is cluster port", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "127.0.0.1:7101", "--peers", "127.0.0.1:7101"}, "--manage-addr and --cluster-addr need different ports (both are 7101)"},
		{"bad peer", append(slices.Clip(auto), "--peers", "127.0.0.1:7201,127.0.0.1"), `--peers: "127.0.0.1" is not HOST:PORT`},
		{"peer without host", append(slices.Clip(auto), "--peers", "127.0.0.1:7201,:7202"), `--peers: ":7202" is not HOST:PORT with a host`},
		{"self not a peer", append(slices.Clip(auto), "--peers", "127.0.0.1:7202,127.0.0.1:7203"), "--peers must include this node's --manage-addr 127.0.0.1:7201"},
		{"k8s with peers", []string{"--cluster", "c", "--cluster-provider", "k8s", "--cluster-addr", "127.0.0.1:7101", "--peers", "127.0.0.1:7201"}, "--peers is for --cluster-provider automanaged"},
		{"k8s with manage-addr", []string{"--cluster", "c", "--cluster-provider", "k8s", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "127.0.0.1:7201"}, "--manage-addr is for --cluster-provider automanaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--keys", keys, "--data", data, "--addr", "127.0.0.1:18080"}, tc.args...)
			_, _, err := run(t, args...)
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tc.want)
			}
			var msg bytes.Buffer
			if code := report(err, &msg); code != exitUsage || !strings.Contains(msg.String(), `"siftbatch serve --help"`) {
				t.Fatalf("exit %d, %q", code, msg.String())
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("serve created --data before refusing its flags")
			}
		})
	}
}
