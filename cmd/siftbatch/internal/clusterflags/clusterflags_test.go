package clusterflags

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
)

// parse parses args into fresh Flags and validates them with apiAddr.
func parse(t *testing.T, apiAddr string, args ...string) (*Flags, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &Flags{}
	c.Add(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return c, c.Validate(set, apiAddr)
}

// TestFlags_Validate: a valid automanaged node passes, its peers split;
// each mistake is a usage error of serve naming the flag.
func TestFlags_Validate(t *testing.T) {
	t.Parallel()
	tls := []string{"--cluster-ca", "ca.crt", "--cluster-cert", "n1.crt", "--cluster-key", "n1.key"}
	ok := append([]string{"--cluster", "c", "--node", "n1", "--cluster-addr", "127.0.0.1:7101",
		"--manage-addr", "127.0.0.1:7201", "--peers", "127.0.0.1:7201, 127.0.0.1:7202"}, tls...)
	c, err := parse(t, "127.0.0.1:8080", ok...)
	if err != nil || strings.Join(c.peerList, ",") != "127.0.0.1:7201,127.0.0.1:7202" {
		t.Fatalf("valid flags: %v, peers %v", err, c.peerList)
	}
	if _, err := parse(t, "127.0.0.1:8080"); err != nil {
		t.Fatalf("no cluster: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "n1"}, "--node needs --cluster NAME"},
		{append(ok[:8:8], "--peers", "127.0.0.1:7202"), "--peers must include this node's --manage-addr"},
		{[]string{"--cluster", "c", "--node", "n1", "--cluster-addr", "127.0.0.1:8080"}, "--cluster-addr and --addr need different ports"},
		{[]string{"--cluster", "c", "--node", "n1", "--cluster-addr", "127.0.0.1:x"}, "--cluster-addr"},
		{[]string{"--cluster", "c", "--node", "n1", "--cluster-addr", "127.0.0.1:0"}, "needs --manage-addr"}, // port 0 is a free one
		{append(ok[:10:10], "--cluster-ca", "ca.crt"), "--cluster-cert FILE is missing"},
		{append(ok[:10:10], append(tls, "--cluster-insecure")...), "--cluster-insecure and --cluster-ca exclude each other"},
		{append(ok[:10:10], "--cluster-provider", "k8s"), "--manage-addr is for --cluster-provider automanaged"},
	} {
		_, err := parse(t, "127.0.0.1:8080", tc.args...)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || ue.Cmd != "serve" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error of serve with %q", tc.args, err, tc.want)
		}
	}
}

// TestHostPort: HOST:PORT with a port from 1 to 65535.
func TestHostPort(t *testing.T) {
	t.Parallel()
	if h, p, err := hostPort("10.0.0.5:7001"); err != nil || h != "10.0.0.5" || p != 7001 {
		t.Errorf("10.0.0.5:7001: %q %d %v", h, p, err)
	}
	for _, bad := range []string{"10.0.0.5", "h:0", "h:65536", "h:x"} {
		if _, _, err := hostPort(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
