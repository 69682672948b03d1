package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestAdv37_READMEClusterBlockPicksNoClosedPort: the README's cluster
// block, which TestREADME_Cluster runs in make test, picks its ten ports
// with python's bind(("127.0.0.1", 0)), closes each, and has serve and
// http.server bind them later: the close-then-rebind the issue hunts (and
// in the kernel's ephemeral range, where any outgoing connection can take
// one meanwhile: "bind: address already in use").
func TestAdv37_READMEClusterBlockPicksNoClosedPort(t *testing.T) {
	t.Parallel()
	block, _ := readmeBlock(t, "cluster")
	if m := regexp.MustCompile(`bind\(\(\s*["'][^"']*["']\s*,\s*0\s*\)\)`).FindString(block); m != "" {
		for line := range strings.Lines(block) {
			if strings.Contains(line, m) {
				t.Errorf("the cluster block picks a port by binding 0 and closing it, then binds it again later:\n%s", line)
			}
		}
	}
}
