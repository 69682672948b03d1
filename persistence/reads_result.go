package persistence

// The reads of results: a target's stored result, inline in its outcome
// row or in chunk rows (keys.go, records.go).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// readResults reads the chunked results of targets chunked (in idx order)
// of a job in one walk of its b keys, each into one slice allocated at its
// size: one iterator, not a point read per chunk. Chunks no outcome needs
// (left by a failed write) are passed over.
func readResults(txn *badger.Txn, id [idLen]byte, ts []TargetRecord, chunked []int) error {
	for _, idx := range chunked {
		ts[idx].Result = make([]byte, ts[idx].ResultSize)
	}
	o := badger.IteratorOptions{Prefix: resultsPrefix(id)}
	it := txn.NewIterator(o)
	defer it.Close()
	k := chunkKey(id, 0, 0)
	for _, idx := range chunked {
		res := ts[idx].Result
		n := chunkCount(int64(len(res)))
		binary.BigEndian.PutUint16(k[1+idLen:], uint16(idx))
		binary.BigEndian.PutUint16(k[1+idLen+2:], 0)
		if !it.Valid() || !bytes.Equal(it.Item().Key(), k) {
			it.Seek(k) // the first target, or chunks left by a failed write between
		}
		for chunk := 0; chunk < n; chunk++ {
			binary.BigEndian.PutUint16(k[1+idLen+2:], uint16(chunk))
			if !it.Valid() || !bytes.Equal(it.Item().Key(), k) {
				return fmt.Errorf("result chunk: %w", ErrCorrupt)
			}
			off := chunk * resultChunkSize
			want := min(len(res)-off, resultChunkSize)
			if err := it.Item().Value(func(v []byte) error {
				if len(v) != want {
					return fmt.Errorf("result chunk: %w", ErrCorrupt)
				}
				copy(res[off:], v)
				return nil
			}); err != nil {
				return err
			}
			it.Next()
		}
	}
	return nil
}

// readResult reads a chunked result of size bytes, target idx's, into one
// slice allocated at its size. A chunk that is missing or of the wrong
// length is ErrCorrupt: chunks are committed before their outcome row.
func readResult(txn *badger.Txn, id [idLen]byte, idx int, size int64) ([]byte, error) {
	res := make([]byte, size)
	for chunk, off := 0, int64(0); off < size; chunk++ {
		item, err := txn.Get(chunkKey(id, idx, chunk))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, fmt.Errorf("result chunk: %w", ErrCorrupt)
		}
		if err != nil {
			return nil, err
		}
		want := min(size-off, resultChunkSize)
		if err := item.Value(func(v []byte) error {
			if int64(len(v)) != want {
				return fmt.Errorf("result chunk: %w", ErrCorrupt)
			}
			copy(res[off:], v)
			return nil
		}); err != nil {
			return nil, err
		}
		off += want
	}
	return res, nil
}

// walkOutcomes calls fn for each r row of a job, in idx order.
func walkOutcomes(txn *badger.Txn, id [idLen]byte, fn func(idx int, v []byte) error) error {
	p := outcomesPrefix(id)
	o := badger.DefaultIteratorOptions
	o.Prefix = p
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	for it.Seek(p); it.ValidForPrefix(p); it.Next() {
		item := it.Item()
		k := item.Key()
		if len(k) != targetKeyLen {
			return fmt.Errorf("target key: %w", ErrCorrupt)
		}
		idx := int(binary.BigEndian.Uint16(k[1+idLen:]))
		if err := item.Value(func(v []byte) error { return fn(idx, v) }); err != nil {
			return err
		}
	}
	return nil
}

// Target returns one stored target with its result, or an error wrapping
// [ErrNotFound].
func (s *Store) Target(idHex string, idx int) (TargetRecord, error) {
	id, ok := parseID(idHex)
	if !ok || idx < 0 || idx > 0xffff {
		return TargetRecord{}, fmt.Errorf("read target: %w", ErrNotFound)
	}
	var t TargetRecord
	err := s.view("read target", func(txn *badger.Txn) error {
		item, err := txn.Get(specsKey(id))
		if err != nil {
			return err
		}
		found := false
		if err := item.Value(func(v []byte) error {
			t, found, err = decodeSpecAt(v, idx)
			return err
		}); err != nil {
			return err
		}
		if !found {
			return ErrNotFound
		}
		o, found, err := getOutcome(txn, id, idx)
		if err != nil || !found {
			return err
		}
		o.fill(&t, true)
		if o.chunked {
			t.Result, err = readResult(txn, id, idx, o.size)
		}
		return err
	})
	return t, err
}

// ResultJSON returns the result (its JSON) of target idx of a job, which
// must be stored done; otherwise (an unknown job, an idx out of range, a
// target pending or failed) an error wrapping [ErrNotFound]. It reads the
// target's outcome row and its result, nothing else.
func (s *Store) ResultJSON(idHex string, idx int) ([]byte, error) {
	id, ok := parseID(idHex)
	if !ok || idx < 0 || idx > 0xffff {
		return nil, fmt.Errorf("read result: %w", ErrNotFound)
	}
	var res []byte
	err := s.view("read result", func(txn *badger.Txn) error {
		o, found, err := getOutcome(txn, id, idx)
		switch {
		case err != nil:
			return err
		case !found || o.status != TargetDone:
			return ErrNotFound
		case o.chunked:
			res, err = readResult(txn, id, idx, o.size)
			return err
		default:
			res = bytes.Clone(o.inline)
			return nil
		}
	})
	return res, err
}

// getOutcome reads target idx's outcome row; false if it has none
// (pending, or no such target). The outcome's slices are copies.
func getOutcome(txn *badger.Txn, id [idLen]byte, idx int) (outcome, bool, error) {
	item, err := txn.Get(outcomeKey(id, idx))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return outcome{}, false, nil
	}
	if err != nil {
		return outcome{}, false, err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return outcome{}, false, err
	}
	o, err := parseOutcome(v)
	return o, err == nil, err
}

// ResultRange returns bytes [off, off+n) of the result (its JSON) of
// target idx of a job, fewer at its end (none past it), and the result's
// whole length; the target must be stored done, as for
// [Store.ResultJSON]. It reads the target's outcome row and only the
// chunks the range covers: a page of a 32 MiB result costs a chunk or
// two (512 KiB each), not the result. A negative off or n reads nothing.
func (s *Store) ResultRange(idHex string, idx int, off, n int64) ([]byte, int64, error) {
	id, ok := parseID(idHex)
	if !ok || idx < 0 || idx > 0xffff {
		return nil, 0, fmt.Errorf("read result: %w", ErrNotFound)
	}
	var res []byte
	var size int64
	err := s.view("read result", func(txn *badger.Txn) error {
		o, found, err := getOutcome(txn, id, idx)
		switch {
		case err != nil:
			return err
		case !found || o.status != TargetDone:
			return ErrNotFound
		}
		size = o.size
		if !o.chunked {
			size = int64(len(o.inline))
		}
		if off < 0 || n <= 0 || off >= size {
			res = []byte{}
			return nil
		}
		end := min(size, off+n)
		if !o.chunked {
			res = bytes.Clone(o.inline[off:end])
			return nil
		}
		res, err = readResultRange(txn, id, idx, size, off, end)
		return err
	})
	return res, size, err
}

// readResultRange reads bytes [off, end) of a chunked result of size
// bytes, from the chunks that hold them.
func readResultRange(txn *badger.Txn, id [idLen]byte, idx int, size, off, end int64) ([]byte, error) {
	res := make([]byte, 0, end-off)
	for chunk := int(off / resultChunkSize); int64(chunk)*resultChunkSize < end; chunk++ {
		item, err := txn.Get(chunkKey(id, idx, chunk))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, fmt.Errorf("result chunk: %w", ErrCorrupt)
		}
		if err != nil {
			return nil, err
		}
		start := int64(chunk) * resultChunkSize
		want := min(size-start, resultChunkSize)
		if err := item.Value(func(v []byte) error {
			if int64(len(v)) != want {
				return fmt.Errorf("result chunk: %w", ErrCorrupt)
			}
			res = append(res, v[max(off-start, 0):min(end-start, want)]...)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return res, nil
}
