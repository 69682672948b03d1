package persistence

// Stand-ins for reads the store branch is building (compact outcome rows,
// chunked results); removed when it lands. Same names, same meaning.

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
