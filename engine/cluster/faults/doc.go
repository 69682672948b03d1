// Package faults is the cluster's fault harness: three `siftbatch serve
// --cluster` processes, each in a network namespace of its own, under
// partitions, one-way partitions, packet loss, delay and a paused
// process, with clients that record every operation in a [History], and
// a checker ([Check]) that reads the history against the guarantees of
// docs/CLUSTER.md.
//
// The history and the checker are plain Go. The harness itself is this
// package's tests: Linux, root, `ip` and `iptables`, and the tier
// "faults" (SIFTBATCH_TIER=faults, make test/faults); elsewhere its tests
// skip with one line. docs/CLUSTER.md's "Faults tested" has what it
// injects and what it found.
package faults
