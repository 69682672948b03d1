package main

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sift/batch/engine"
)

// Caller classes, passed to [engine.Runner.Submit].
const (
	classStandard   = "standard"
	classRestricted = "restricted"
)

// apiKey is one line of the keys file, with the key itself kept only as its
// SHA-256.
type apiKey struct {
	sum    [sha256.Size]byte
	name   string
	class  string
	sumHex string
}

// caller returns the engine caller for the key.
func (k *apiKey) caller() *engine.Caller {
	return &engine.Caller{Name: k.name, KeySHA256: k.sumHex}
}

// keyring holds the API keys. It is read-only once loaded and so safe for
// concurrent use.
type keyring struct{ keys []apiKey }

// loadKeys reads a keys file: one key a line, "NAME KEY [restricted]";
// blank lines and lines starting with # are skipped. Errors name the line,
// never the key.
func loadKeys(path string) (*keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	defer f.Close()
	return parseKeys(f)
}

func parseKeys(r io.Reader) (*keyring, error) {
	kr := &keyring{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || len(fields) > 3 || (len(fields) == 3 && fields[2] != classRestricted) {
			return nil, fmt.Errorf("keys line %d: want NAME KEY [restricted]", n)
		}
		k := apiKey{name: fields[0], sum: sha256.Sum256([]byte(fields[1])), class: classStandard}
		k.sumHex = hex.EncodeToString(k.sum[:])
		if len(fields) == 3 {
			k.class = classRestricted
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
		return nil, fmt.Errorf("read keys: no keys")
	}
	return kr, nil
}

// lookup returns the entry for a presented key. It compares the key's
// SHA-256 with every entry in constant time, so the answer's timing does not
// depend on which entry matched or how much of it.
func (kr *keyring) lookup(key string) (*apiKey, bool) {
	sum := sha256.Sum256([]byte(key))
	found := -1
	for i := range kr.keys {
		if subtle.ConstantTimeCompare(sum[:], kr.keys[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 || key == "" {
		return nil, false
	}
	return &kr.keys[found], true
}
