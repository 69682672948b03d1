package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/cluster/clustertls"
)

// runClusterCerts is the cluster-certs command: a fresh CA and one key pair
// per node for a cluster's mutual TLS (clustertls.Write), then the serve
// flags that use them. It never overwrites a file.
func runClusterCerts(_ context.Context, args []string, stdout, _ io.Writer) error {
	var dir, nodes, hosts string
	fs := cli.NewFlagSet("cluster-certs", "cluster-certs --dir DIR --nodes NODE,... [--hosts HOST,...]",
		"Write a cluster's certificates: a fresh certificate authority (DIR/ca.crt,\nDIR/ca.key) and, for each node, a key pair signed by it (DIR/NODE.crt,\nDIR/NODE.key), ECDSA P-256; keys are written 0600, and no file is overwritten.\nEach node's certificate names the node (its common name and a DNS name: serve\n--node must be that name) and, without --hosts, localhost, 127.0.0.1 and ::1.\nA node accepts a peer whose certificate chains to the CA and names a node; the\naddress it dialled is not checked. Give every node ca.crt and its own NODE.crt\nand NODE.key (serve --cluster-ca, --cluster-cert, --cluster-key); keep ca.key\noff the nodes. A CA is valid 10 years, a node's certificate 5.")
	fs.StringVar(&dir, "dir", "", "`DIR` to write the files into, created if missing (required)")
	fs.StringVar(&nodes, "nodes", "", "the nodes' names as `NODE,...`, each serve's --node (a StatefulSet pod's name):\nletters, digits, '-', '_' and '.' (required)")
	fs.StringVar(&hosts, "hosts", "", "names and IP addresses as `HOST,...`, put in every node's certificate instead\nof the default localhost,127.0.0.1,::1 (nodes never check them: they are for\nother tools that check the address they dial)")
	if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
		return err
	}
	if strings.TrimSpace(dir) == "" {
		return cli.CmdUsagef("cluster-certs", "--dir is required (the directory to write the certificates into)")
	}
	if strings.TrimSpace(nodes) == "" {
		return cli.CmdUsagef("cluster-certs", "--nodes is required: the names of the nodes, each serve's --node, as NODE,...")
	}
	nodeList := splitList(nodes)
	hostList := splitList(hosts)
	if hosts != "" {
		for _, h := range hostList {
			if !validHost(h) {
				return cli.CmdUsagef("cluster-certs", "--hosts: %q is neither a DNS name nor an IP address", h)
			}
		}
	}
	if err := clustertls.Write(dir, nodeList, hostList); err != nil {
		if errors.Is(err, clustertls.ErrBadNodeName) {
			return cli.CmdUsagef("cluster-certs", "--nodes: %v", err)
		}
		return fmt.Errorf("cluster-certs: %w (it never overwrites a file: remove the old ones, or give another --dir)", err)
	}
	if len(hostList) == 0 {
		hostList = clustertls.DefaultHosts
	}
	fmt.Fprintf(stdout, "siftbatch cluster-certs: wrote into %s:\n", dir)
	fmt.Fprintf(stdout, "  ca.crt   the cluster's CA certificate: every node's --cluster-ca\n")
	fmt.Fprintf(stdout, "  ca.key   the CA's key (0600): keep it off the nodes, somewhere safe (it signs new node certificates)\n")
	for _, n := range nodeList {
		fmt.Fprintf(stdout, "  %s.crt, %s.key (0600)   node %s's certificate and key\n", n, n, n)
	}
	fmt.Fprintf(stdout, "Each node's certificate names the node and %s.\n", strings.Join(hostList, ", "))
	fmt.Fprintf(stdout, "serve's flags, on each node (with --cluster and its other flags):\n")
	for _, n := range nodeList {
		fmt.Fprintf(stdout, "  --node %s --cluster-ca %s --cluster-cert %s --cluster-key %s\n",
			n, filepath.Join(dir, "ca.crt"), filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key"))
	}
	return nil
}

// splitList splits a comma-separated flag's value, each item trimmed; ""
// is no item.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		out = append(out, strings.TrimSpace(item))
	}
	return out
}

// validHost reports whether h can be a name or address of a certificate:
// an IP address, or a DNS name of labels of letters, digits, '-' and '_'
// (the first label may be "*").
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "" || h == "*" || len(h) > 253 {
		return false
	}
	for i, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "*" && i == 0 {
			continue
		}
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
