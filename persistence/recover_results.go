package persistence

// Results a power cut left unreadable. Badger writes a large value to its
// value log and a pointer to it in its memtable's log; a cut may keep the
// pointer and lose the value's bytes (the two files reach the disk in no
// set order until both are synced), and Badger's recovery replays the
// pointer without reading what it points at: the row is there, its value
// reads "End of file". A durable store never answers a write before both
// are synced, so such a result was never acknowledged (the power-cut test,
// docs/RELIABILITY.md "Power cut"); on a store that is not durable it is
// the documented loss. Either way it is a result that is not stored, not a
// damaged store: [Store.DropUnreadableResults] takes its outcome row and
// chunks away, so that its target reads as never stored and its job's
// other results read, and the runner's restart calls it for each job that
// was live (engine's reap).

import (
	"github.com/dgraph-io/badger/v4"
)

// DropUnreadableResults deletes, of job idHex, each outcome row whose
// result's chunks do not read (see the top of recover_results.go), with
// its chunks, and returns how many it deleted; [Store.Recovery] counts
// them. Call it for a job that is not settled, before it is settled: its
// progress is counted from its outcome rows, so its counts stay right. An
// unknown id deletes nothing. Safe for concurrent use.
func (s *Store) DropUnreadableResults(idHex string) (int, error) {
	id, ok := parseID(idHex)
	if !ok {
		return 0, nil
	}
	dropped := 0
	err := s.update("drop unreadable results", func(txn *badger.Txn) (int64, error) {
		type gone struct {
			idx  int
			size int64
			row  int64
		}
		var drop []gone
		err := walkOutcomes(txn, id, func(idx int, v []byte) error {
			o, err := parseOutcome(v)
			if err != nil || !o.chunked {
				return nil // a row that does not parse is Open's and the reads' to refuse
			}
			if _, err := readResult(txn, id, idx, o.size); err != nil {
				drop = append(drop, gone{idx, o.size, outcomeBytes(v)})
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		var delta int64
		for _, g := range drop {
			if err := txn.Delete(outcomeKey(id, g.idx)); err != nil {
				return 0, err
			}
			for chunk := range int((g.size + resultChunkSize - 1) / resultChunkSize) {
				if err := txn.Delete(chunkKey(id, g.idx, chunk)); err != nil {
					return 0, err
				}
			}
			delta -= g.row
		}
		dropped = len(drop)
		return delta, nil
	})
	if err != nil {
		return 0, err
	}
	if dropped > 0 {
		s.noteRecovery(func(r *Recovery) { r.DroppedResults += dropped })
	}
	return dropped, nil
}
