package engine

import (
	"fmt"
)

// NodeTags returns the tags of the cluster nodes [Peer.RememberNodeTag]
// stored in the runner's store, each with its node's name: what a cluster
// node (package github.com/sift/batch/engine/cluster) has met before it
// started. At most [persistence.MaxNodeTags]. [ShortID] knows them from
// then on. Safe for concurrent use.
func (p Peer) NodeTags() (map[[NodeTagLen]byte]string, error) {
	if p.r == nil {
		return nil, noRunner("node tags")
	}
	tags, err := p.r.store.NodeTags()
	if err != nil {
		return nil, fmt.Errorf("node tags: %w", err)
	}
	for tag := range tags {
		rememberTag(tag[:])
	}
	return tags, nil
}

// RememberNodeTag stores in the runner's store that the cluster node named
// node has tag, for [Peer.NodeTags] after a restart. A tag stored already
// with that name is not written again. Past [persistence.MaxNodeTags] tags
// a new one is refused with an error wrapping
// [persistence.ErrTooManyNodeTags]. [ShortID] knows the tag from then on.
// Safe for concurrent use.
func (p Peer) RememberNodeTag(tag [NodeTagLen]byte, node string) error {
	if p.r == nil {
		return noRunner("remember node tag")
	}
	if err := p.r.store.PutNodeTag(tag, node); err != nil {
		return fmt.Errorf("remember node tag: %w", err)
	}
	rememberTag(tag[:])
	return nil
}
