package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sift/batch/engine/httpapi"
)

// TestAdv37_KeysFileRefusesControlBytes: a name or key holding a control
// byte (NUL, ESC, DEL) is refused with an error that names the line and
// quotes no key. Such a key can never be sent (no HTTP header carries a
// NUL), and the runner's idempotency hash counts on a caller name without
// a 0 byte (engine/runner.go: "keys files name callers with printable
// words"); ReadKeys accepts both today.
func TestAdv37_KeysFileRefusesControlBytes(t *testing.T) {
	t.Parallel()
	for name, line := range map[string]string{
		"NUL in the key":  "alice supersecret-key\x00tail admin\n",
		"ESC in the key":  "alice supersecret\x1b[31mkey\n",
		"NUL in the name": "al\x00ice supersecret-key-1\n",
		"DEL in the name": "al\x7fice supersecret-key-2\n",
	} {
		_, err := httpapi.ReadKeys(strings.NewReader(line))
		if err == nil {
			t.Errorf("%s: accepted; want an error naming line 1", name)
			continue
		}
		if !strings.Contains(err.Error(), "line 1") || strings.Contains(err.Error(), "supersecret") {
			t.Errorf("%s: %v; want line 1 named and no key quoted", name, err)
		}
	}
}

// TestAdv37_KeysFileErrorNeverQuotesAKey: whatever sits in the third
// word's place (a key pasted in the wrong column, unicode, a huge word),
// the error never quotes it unless it is a short word of letters.
func TestAdv37_KeysFileErrorNeverQuotesAKey(t *testing.T) {
	t.Parallel()
	for _, third := range []string{"s3cr3t", "sécret", "AdminKEYxyzAB", strings.Repeat("k", 1<<16), "\u200badmin", "ＡＤＭＩＮ"} {
		_, err := httpapi.ReadKeys(strings.NewReader("alice alice-secret-key-1 " + third + "\n"))
		if err == nil {
			t.Errorf("third word %.20q: accepted", third)
			continue
		}
		if strings.Contains(err.Error(), third) {
			t.Errorf("third word %.20q: the error quotes it: %.200s", third, err)
		}
	}
}
