package remote

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
)

// TestAdv37_ServerFlagRefusesWhatCannotBeDialled: a --server that no
// connection can ever reach (a port past 65535 or negative, a scheme the
// client cannot speak) is a usage error naming --server, as an empty one
// is, not a dial error with no hint ("dial tcp: address 99999: invalid
// port").
func TestAdv37_ServerFlagRefusesWhatCannotBeDialled(t *testing.T) {
	t.Parallel()
	key := writeFile(t, "key", "alice-key\n")
	for _, server := range []string{"http://127.0.0.1:99999", "127.0.0.1:-1", "ftp://127.0.0.1:8080"} {
		err := List(context.Background(), []string{"--server", server, "--key-file", key}, io.Discard, io.Discard)
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("--server %q: %v; want a usage error naming --server", server, err)
		}
	}
}
