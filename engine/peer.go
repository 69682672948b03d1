package engine

import "fmt"

// Peer is what a cluster node (package
// github.com/sift/batch/engine/cluster) reads and writes of its runner, apart
// from the Runner an embedder uses: the tags of the nodes it has met
// ([Peer.NodeTags], [Peer.RememberNodeTag]), a caller's page with each job's
// cursor, for the merge of the members' pages ([Peer.ListAt]), and a
// caller's jobs as a cluster's admission counts them ([Peer.Admitted],
// [Peer.Reusable]). Get one with [PeerOf]. A Peer is a small value: copy it
// freely. It is safe for concurrent use, as its Runner is.
type Peer struct{ r *Runner }

// PeerOf returns r's [Peer]. A Peer of a nil runner reads and writes
// nothing: each method returns an error wrapping [ErrInvalid] (Reusable,
// false).
func PeerOf(r *Runner) Peer { return Peer{r: r} }

// noRunner is the error of a Peer's method with no runner.
func noRunner(what string) error { return fmt.Errorf("%s: %w: no runner", what, ErrInvalid) }
