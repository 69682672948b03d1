package persistence

import "encoding/binary"

// encodeOutcomeV2 encodes an outcome as format version 2 did (result
// inline, whatever its length), for the tests that read such rows.
func encodeOutcomeV2(t *TargetRecord) []byte {
	b := []byte{formatVersion2, statusCode(targetStatusCodes, t.Status)}
	b = binary.BigEndian.AppendUint64(b, uint64(t.Stored))
	b = appendBytes(b, t.Result)
	b = appendString(b, t.Error)
	return appendString(b, t.Hint)
}
