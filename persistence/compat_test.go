package persistence

import (
	"encoding/binary"
	"slices"
)

// encodeOutcomeV2 encodes an outcome as format version 2 did (result
// inline, whatever its length), for the tests that read such rows.
func encodeOutcomeV2(t *TargetRecord) []byte {
	b := []byte{formatVersion2, statusCode(targetStatusCodes, t.Status)}
	b = binary.BigEndian.AppendUint64(b, uint64(t.Stored))
	b = appendBytes(b, t.Result)
	b = appendString(b, t.Error)
	return appendString(b, t.Hint)
}

// encodeOutcomeAs encodes t's outcome (a result of t.ResultSize bytes, of
// which t.Result is the start) as format version v wrote it: version 3
// had no took, version 2 held its result inline. t.Took must be 0 for an
// older version.
func encodeOutcomeAs(v byte, t *TargetRecord) []byte {
	switch v {
	case formatVersion2:
		return encodeOutcomeV2(t)
	case formatVersion3:
		b := appendOutcomeOf(nil, t, t.ResultSize, t.Result)
		b[0] = formatVersion3
		return slices.Delete(b, outcomeFixedLen3, outcomeFixedLen)
	}
	return appendOutcomeOf(nil, t, t.ResultSize, t.Result)
}

// encodeJobAs encodes j's row as format version v wrote it: versions 2
// and 3 had no started and ended times (j's must be 0).
func encodeJobAs(v byte, j *JobRecord) []byte {
	b := encodeJob(j)
	if v == formatVersion {
		return b
	}
	b[0] = v
	return b[:len(b)-jobTimesLen]
}

// encodeSpecsAs encodes a specs row as format version v wrote it: the same
// but for its version byte.
func encodeSpecsAs(v byte, ts []TargetRecord) []byte {
	b := encodeSpecs(ts)
	b[0] = v
	return b
}
