package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/sift/batch/actors"
	"github.com/sift/batch/persistence"
)

// Bounds on what a failed target stores: an error text or a hint longer
// than this is cut (at a rune boundary) and ends with "…".
const (
	MaxErrorBytes = 4 << 10
	MaxHintBytes  = 1 << 10
)

// internalErrorText is the error stored for a target whose FetchFunc
// panicked, ended its goroutine or returned a nil *TargetError.
const internalErrorText = "internal error"

// errResultTooLarge is the error stored, and the error Hooks.Target is
// told, for a result larger than the store takes.
var errResultTooLarge = errors.New("result too large to store")

// fetchOne runs the FetchFunc for one target and classifies its outcome.
// A panic is not recovered here: it crashes the worker actor, and the
// supervision strategy stores the target failed.
func (r *Runner) fetchOne(ctx context.Context, payload any, idx int) actors.Outcome {
	s := payload.(*submission)
	res, err := r.fetch(ctx, s.caller, s.targets[idx])
	if err != nil {
		return failure(err)
	}
	b, err := encodeResult(&res)
	switch {
	case err != nil:
		err = errors.New("result cannot be encoded as JSON")
		return actors.Outcome{Err: err, Msg: err.Error()}
	case len(b) > persistence.MaxResultSize:
		return actors.Outcome{Err: errResultTooLarge, Msg: errResultTooLarge.Error(),
			Hint: "the page is larger than the runner stores; ask for less of it (its options) or fetch it alone"}
	}
	return actors.Outcome{Result: b}
}

// failure classifies a FetchFunc's error.
func failure(err error) actors.Outcome {
	var te *TargetError
	switch {
	case errors.Is(err, ErrRetryLater):
		return actors.Outcome{Err: err, Msg: cut(err.Error(), MaxErrorBytes), Busy: true}
	case errors.As(err, &te) && te == nil:
		// A nil *TargetError in a non-nil error: a bug in the FetchFunc.
		err = errors.New(internalErrorText)
		return actors.Outcome{Err: err, Msg: internalErrorText}
	case te != nil:
		return actors.Outcome{Err: err, Msg: cut(te.Msg, MaxErrorBytes), Hint: cut(te.Hint, MaxHintBytes)}
	}
	return actors.Outcome{Err: err, Msg: cut(err.Error(), MaxErrorBytes)}
}

// cut returns s if it is at most n bytes, or its first bytes, at a rune
// boundary, and "…", n bytes at most in all.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	return strings.ToValidUTF8(s[:n-len(more)], "") + more // drops a rune cut in two
}

// maxPooledBuf: a buffer that grew past this for a large result is left to
// the GC rather than kept.
const maxPooledBuf = 256 << 10

var resultBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// encodeResult encodes res as JSON without HTML escaping: a stored result
// is written out as it is, and "<" stays "<".
func encodeResult(res *Result) ([]byte, error) {
	buf := resultBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBuf {
			resultBufs.Put(buf)
		}
	}()
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}
