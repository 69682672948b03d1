package engine

import (
	"fmt"
)

// NodeTags returns the tags of the cluster nodes [Runner.RememberNodeTag]
// stored in the runner's store, each with its node's name: what a cluster
// node (package github.com/sift/batch/engine/cluster) has met before it
// started. At most [persistence.MaxNodeTags]. Safe for concurrent use.
func (r *Runner) NodeTags() (map[[NodeTagLen]byte]string, error) {
	tags, err := r.store.NodeTags()
	if err != nil {
		return nil, fmt.Errorf("node tags: %w", err)
	}
	return tags, nil
}

// RememberNodeTag stores in the runner's store that the cluster node named
// node has tag, for [Runner.NodeTags] after a restart. A tag stored already
// with that name is not written again. Past [persistence.MaxNodeTags] tags
// a new one is refused with an error wrapping
// [persistence.ErrTooManyNodeTags]. Safe for concurrent use.
func (r *Runner) RememberNodeTag(tag [NodeTagLen]byte, node string) error {
	if err := r.store.PutNodeTag(tag, node); err != nil {
		return fmt.Errorf("remember node tag: %w", err)
	}
	return nil
}
