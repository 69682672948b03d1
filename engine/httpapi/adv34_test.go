package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sift/batch/engine/httpapi"
)

// TestAdv34_LoadKeysRefusesShortKeysNamingTheLine (holds): a key file
// whose key is shorter than 16 characters is refused with its line
// number, never the key; a key given twice likewise; a key with a space
// in it is no key of 16 characters (it reads as NAME KEY CLASS and is
// refused); 16 characters, multi-byte ones included, are taken.
func TestAdv34_LoadKeysRefusesShortKeysNamingTheLine(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) error {
		p := filepath.Join(dir, "keys")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := httpapi.LoadKeys(p)
		return err
	}
	long := "0123456789abcdef0123"
	for _, tc := range []struct {
		body, line, secret string
	}{
		{"alice " + long + "\n# c\nbob s3cr3t-Short15\n", "line 3", "s3cr3t-Short15"},
		{"alice " + long + "\nbob Q\n", "line 2", " Q"},
		{"alice " + long + "\nbob " + long + "\n", "line 2", long},
		{"alice secretpart1 secretpart2xx\n", "line 1", "secretpart"},
		{"alice ééééééééééééééé\n", "line 1", "ééé"}, // 15 runes, 30 bytes
	} {
		err := load(tc.body)
		if err == nil {
			t.Errorf("%q: taken", tc.body)
			continue
		}
		if !strings.Contains(err.Error(), tc.line) || strings.Contains(err.Error(), tc.secret) {
			t.Errorf("%q: %v: want %s named and the key not", tc.body, err, tc.line)
		}
	}
	if err := load("alice éééééééééééééééé\nbob\t" + long + "\tadmin\n"); err != nil {
		t.Errorf("16 runes and a tab-separated key: %v", err)
	}
}
