package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sift/batch/engine"
)

// Caller classes, as the key file names them. The handler passes a
// caller's class to [engine.Runner.Submit], which hands it to nothing but
// the embedder. The API treats them alike but for the list: an admin key
// may list any caller's jobs (GET /v1/batch?caller=NAME, or * for every
// caller's); reads by id stay the owner's. The dashboard (package
// github.com/sift/batch/engine/dashboard) shows an admin every caller's
// jobs and the runner's state, and lets it cancel any job.
const (
	ClassStandard   = "standard"
	ClassRestricted = "restricted"
	ClassAdmin      = "admin"
)

// ErrUnknownKey is returned, possibly wrapped, by an [Authenticator] for a
// key it does not know: the handler answers 401.
var ErrUnknownKey = errors.New("unknown key")

// Authenticator tells who presents an API key. The handler takes the key
// from an "Authorization: Bearer KEY" header only (no cookie, no query
// parameter) and calls Authenticate with it, on the request's goroutine;
// an Authenticator must be safe for concurrent use.
//
// Authenticate returns the caller the key belongs to, with a non-empty
// Name, and its class (passed to [engine.Runner.Submit]). For a key it
// does not know it returns an error wrapping [ErrUnknownKey] (401); any
// other error is answered 503 and logged without its text, which may name
// the embedder's own systems.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (c *engine.Caller, class string, err error)
}

// AuthenticatorFunc is a function that is an [Authenticator].
type AuthenticatorFunc func(ctx context.Context, key string) (*engine.Caller, string, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, key string) (*engine.Caller, string, error) {
	return f(ctx, key)
}

// Keys is the [Authenticator] of a key file: one key a line,
// "NAME KEY [restricted|admin]"; blank lines and lines starting with # are
// skipped. Only each key's SHA-256 is kept. A Keys is read-only once made
// and safe for concurrent use.
type Keys struct{ keys []apiKey }

// apiKey is one line of a key file.
type apiKey struct {
	sum    [sha256.Size]byte
	sumHex string
	name   string
	class  string
}

// LoadKeys reads the key file at path, as [ReadKeys] does, and refuses a
// key shorter than [MinKeyLen] characters, naming its line (never the key):
// a key file is what an operator writes, and a short key can be guessed.
func LoadKeys(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	defer f.Close()
	return readKeys(f, MinKeyLen)
}

// MinKeyLen is the shortest key [LoadKeys] takes, in characters: a
// shorter one can be guessed, even at the rate package keyguard lets
// unknown keys through.
const MinKeyLen = 16

// ReadKeys reads a key file from r. A file without keys, a malformed line,
// a caller named "*" (which means every caller in ?caller=*), a name or
// key holding a control character (NUL, ESC, DEL…; no header carries a
// NUL, and callers are named with printable words) or a key
// given twice is an error that names the line, never the key. It takes
// keys of any length (tests, and embedders whose keys are made
// elsewhere); [LoadKeys], serve's, refuses those under [MinKeyLen]. A UTF-8 byte order
// mark at its start (some editors save one) is not part of the first name;
// words are apart by any Unicode space.
func ReadKeys(r io.Reader) (*Keys, error) { return readKeys(r, 1) }

// readKeys is ReadKeys, refusing keys shorter than minLen characters.
func readKeys(r io.Reader, minLen int) (*Keys, error) {
	kr := &Keys{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if n == 1 {
			text = strings.TrimPrefix(text, "\ufeff")
		}
		line := strings.TrimSpace(text)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if err := checkKeyLine(fields); err != nil {
			return nil, fmt.Errorf("keys line %d: %s; want NAME KEY [restricted|admin]", n, err)
		}
		if fields[0] == "*" {
			return nil, fmt.Errorf("keys line %d: no caller may be named * (it means every caller)", n)
		}
		if utf8.RuneCountInString(fields[1]) < minLen {
			return nil, fmt.Errorf("keys line %d: the key is shorter than %d characters; make it long and random (openssl rand -hex 24)", n, minLen)
		}
		k := apiKey{name: fields[0], sum: sha256.Sum256([]byte(fields[1])), class: ClassStandard}
		k.sumHex = hex.EncodeToString(k.sum[:])
		if len(fields) == 3 {
			k.class = fields[2]
		}
		for _, other := range kr.keys {
			if other.sum == k.sum {
				return nil, fmt.Errorf("keys line %d: a key is given twice", n)
			}
		}
		kr.keys = append(kr.keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	if len(kr.keys) == 0 {
		return nil, errors.New("read keys: no keys")
	}
	return kr, nil
}

// checkKeyLine checks the words of a key file's line, and says which is
// wrong without ever quoting one that may be a key: a class word is
// quoted only when it is a short word of letters, as a class is and a key
// is not meant to be.
func checkKeyLine(fields []string) error {
	switch {
	case len(fields) == 1:
		return errors.New("one word only (a name, or a key, alone)")
	case len(fields) > 3:
		return fmt.Errorf("%d words, not 2 or 3", len(fields))
	case strings.ContainsFunc(fields[0], unicode.IsControl):
		return errors.New("the name holds a control character (NUL, ESC, DEL or the like)")
	case strings.ContainsFunc(fields[1], unicode.IsControl):
		return errors.New("the key holds a control character (NUL, ESC, DEL or the like), which no request can send (not shown)")
	case len(fields) == 3 && fields[2] != ClassRestricted && fields[2] != ClassAdmin:
		class := fields[2]
		if len(class) > 12 || strings.ContainsFunc(class, func(r rune) bool { return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') }) {
			return errors.New("the third word is not restricted or admin (not shown: it may be a key)")
		}
		if class == ClassStandard {
			return errors.New(`the third word is "standard", the default class: leave it out`)
		}
		return fmt.Errorf("the third word, %q, is not restricted or admin", class)
	}
	return nil
}

// Authenticate returns the caller of key, named as in the file, with the
// key's hex SHA-256 as its KeySHA256, and its class. It compares the key's
// SHA-256 with every entry in constant time, so the answer's timing does
// not depend on which entry matched or how much of it. An unknown or empty
// key is [ErrUnknownKey].
func (kr *Keys) Authenticate(_ context.Context, key string) (*engine.Caller, string, error) {
	sum := sha256.Sum256([]byte(key))
	found := -1
	for i := range kr.keys {
		if subtle.ConstantTimeCompare(sum[:], kr.keys[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 || key == "" {
		return nil, "", ErrUnknownKey
	}
	k := &kr.keys[found]
	return &engine.Caller{Name: k.name, KeySHA256: k.sumHex}, k.class, nil
}

// ErrThrottled is what a [ThrottledError] is: an [Authenticator] (package
// github.com/sift/batch/engine/keyguard's) refused to check a key, because
// the client's address has presented too many unknown ones. The API, the
// MCP server and the dashboard answer it 429 with Retry-After.
var ErrThrottled = errors.New("too many failed keys")

// ThrottledError is returned by an [Authenticator] that refuses to check a
// key for now; it is [ErrThrottled] to [errors.Is]. RetryAfter is how long
// until the client's address may try a key again.
type ThrottledError struct{ RetryAfter time.Duration }

// Error returns ErrThrottled's text.
func (e *ThrottledError) Error() string { return ErrThrottled.Error() }

// Is reports target == ErrThrottled.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// WriteThrottled answers err, an error wrapping a [ThrottledError], 429
// with its Retry-After in whole seconds (at least 1), as the API answers
// every error: JSON {"error", "hint"}.
func WriteThrottled(w http.ResponseWriter, err error) {
	s := RetryAfterSeconds(err)
	w.Header().Set("Retry-After", strconv.Itoa(s))
	writeError(w, http.StatusTooManyRequests, "too many failed keys",
		"this address presented too many unknown keys: wait "+strconv.Itoa(s)+"s before the next request")
}

// RetryAfterSeconds is the Retry-After of err's [ThrottledError] in whole
// seconds, rounded up, at least 1.
func RetryAfterSeconds(err error) int {
	var te *ThrottledError
	s := 1
	if errors.As(err, &te) {
		s = max(1, int((te.RetryAfter+time.Second-1)/time.Second))
	}
	return s
}
