package persistence

// Stand-ins for reads the store branch is building (compact outcome rows,
// chunked results); removed when it lands. Same names, same meaning.

import "fmt"

// MaxResultSize is the largest result the store takes.
const MaxResultSize = 1 << 20

// TargetStatuses returns a job and its targets without results.
func (s *Store) TargetStatuses(idHex string) (JobRecord, []TargetRecord, error) {
	j, ts, err := s.JobWithTargets(idHex)
	for i := range ts {
		ts[i].Result = nil
	}
	return j, ts, err
}

// ResultJSON returns one done target's result.
func (s *Store) ResultJSON(idHex string, idx int) ([]byte, error) {
	t, err := s.Target(idHex, idx)
	if err != nil {
		return nil, err
	}
	if t.Status != TargetDone {
		return nil, fmt.Errorf("read result: %w", ErrNotFound)
	}
	return t.Result, nil
}

// TouchUnexpired is Touch that leaves an expired settled job as it is.
func (s *Store) TouchUnexpired(idHex string, lease, minLease int64) (bool, error) {
	j, err := s.Row(idHex)
	if err != nil {
		return false, nil
	}
	if j.Settled && j.Lease <= minLease {
		return false, nil
	}
	return s.Touch(idHex, lease)
}
