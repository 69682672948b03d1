package persistence

// The cluster's node tags (n keys, keys.go): the nodes a cluster node has
// met, remembered across its restarts, so that it still knows a job id
// whose tag is another node's for that node's job, when that node is not
// a member.

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Bounds of the node tags a store remembers: a cluster has few nodes, but
// what a peer says it is comes from the network.
const (
	// MaxNodeTags is how many node tags a store remembers at most.
	MaxNodeTags = 1024
	// MaxNodeNameLen is the longest node name, in bytes, a store remembers.
	MaxNodeNameLen = 1024
)

// nodeTagFormat is the format byte of an n key's value.
const nodeTagFormat = 1

// PutNodeTag remembers that the cluster node named node has tag. A tag
// stored already with that name is not written again; with another name
// (two names with one tag) it takes node. A name longer than
// [MaxNodeNameLen] is an error wrapping [ErrTooLarge], a new tag past
// [MaxNodeTags] one wrapping [ErrTooManyNodeTags]. It is one serialised
// write, safe for concurrent use.
func (s *Store) PutNodeTag(tag [nodeTagLen]byte, node string) error {
	const op = "store node tag"
	if len(node) > MaxNodeNameLen {
		return fmt.Errorf("%s: %w", op, ErrTooLarge)
	}
	key := nodeKey(tag)
	value := append([]byte{nodeTagFormat}, node...)
	return s.update(op, func(txn *badger.Txn) (int64, error) {
		item, err := txn.Get(key)
		switch {
		case err == nil:
			same := false
			if err := item.Value(func(v []byte) error { same = bytes.Equal(v, value); return nil }); err != nil {
				return 0, err
			}
			if same {
				return 0, nil // nothing to commit
			}
		case errors.Is(err, badger.ErrKeyNotFound):
			n, err := countNodeTags(txn)
			if err != nil {
				return 0, err
			}
			if n >= MaxNodeTags {
				return 0, ErrTooManyNodeTags
			}
		default:
			return 0, err
		}
		return 0, txn.Set(key, value)
	})
}

// countNodeTags counts the n keys, reading keys only.
func countNodeTags(txn *badger.Txn) (int, error) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixNode}})
	defer it.Close()
	n := 0
	for it.Rewind(); it.Valid(); it.Next() {
		n++
	}
	return n, nil
}

// NodeTags returns every node tag [Store.PutNodeTag] stored, each with its
// node's name, from one snapshot: at most [MaxNodeTags]. A row that does
// not decode is an error wrapping [ErrCorrupt]. Safe for concurrent use.
func (s *Store) NodeTags() (map[[nodeTagLen]byte]string, error) {
	tags := map[[nodeTagLen]byte]string{}
	err := s.view("read node tags", func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixNode}, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != nodeKeyLen {
				return fmt.Errorf("node tag key: %w", ErrCorrupt)
			}
			var tag [nodeTagLen]byte
			copy(tag[:], k[1:])
			err := it.Item().Value(func(v []byte) error {
				if len(v) == 0 || v[0] != nodeTagFormat {
					return fmt.Errorf("node tag: %w", ErrCorrupt)
				}
				tags[tag] = string(v[1:])
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return tags, nil
}
