// Package loopback picks loopback ports for a process that must be told
// its ports before it starts and binds them itself: the serve processes of
// `siftbatch demo-cluster` and of the command's tests (their peers are
// named on their command lines). A program that serves in its own process
// hands a listener over instead, and never needs this.
package loopback

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports returns n distinct ports of 127.0.0.1, free when picked.
//
// A port closed and bound again later may be taken meanwhile; a port the
// kernel hands out (to any bind of port 0, or any outgoing connection) is
// the likeliest to be. So each port is picked outside the kernel's
// ephemeral range (net.ipv4.ip_local_port_range: 32768-60999 by default),
// where no kernel allocation lands, found free by binding it; the binds are
// held until all n are picked, then released for the process that binds
// them. The process keeps its ports across a restart too. What could still
// take one is another program that names that very port: one that picked
// the same one of some 20,000 at the same moment.
func Ports(n int) ([]int, error) {
	lo, hi := pickRange()
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, errors.New("pick loopback ports: none free")
		}
		p := lo + rand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use, or held already by this pick
		}
		held = append(held, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// pickRange returns the ports Ports picks from: below the kernel's
// ephemeral range, or above it if it leaves too little below.
func pickRange() (lo, hi int) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			z, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= z {
				elo, ehi = a, z
			}
		}
	}
	switch {
	case elo-1 >= 12000:
		return 10000, elo - 1
	case 65535-ehi >= 2000:
		return ehi + 1, 65535
	default:
		return 1024, 65535 // the whole range is ephemeral: pick anywhere
	}
}
