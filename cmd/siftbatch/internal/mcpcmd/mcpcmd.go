// Package mcpcmd is the siftbatch mcp command: the MCP server over stdio,
// for MCP clients that launch a command, calling a serve's API with one
// key (package github.com/sift/batch/engine/mcpserver).
package mcpcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/mcpserver"
)

// maxKeyFile caps a key file's size: it holds one key.
const maxKeyFile = 4 << 10

// Command returns the mcp command, reading MCP messages from stdin and
// writing them to its stdout; diagnostics go to stderr (an MCP client
// shows them), never a key.
func Command(stdin io.Reader) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := cli.NewFlagSet("mcp", "mcp --server URL --key-file FILE",
			"Serve the batch API as MCP tools over stdio (stdin and stdout), for an MCP\n"+
				"client that launches a command: batch_submit, batch_status, batch_wait,\n"+
				"batch_result, batch_list and batch_cancel, each a call to the serve at\n"+
				"--server with the key in --key-file. serve also answers MCP itself at\n"+
				"/mcp (streamable HTTP) for clients that connect to a URL.")
		server := fs.String("server", "", "the serve to call, such as http://127.0.0.1:8080 (required)")
		keyFile := fs.String("key-file", "", "a file that holds the API key alone (required)")
		if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
			return err
		}
		if *server == "" || *keyFile == "" {
			return cli.CmdUsagef("mcp", "--server and --key-file are required")
		}
		key, err := ReadKeyFile(*keyFile)
		if err != nil {
			return err
		}
		err = mcpserver.ServeStdio(ctx, *server, key, nil, io.NopCloser(stdin), nopCloser{stdout}, mcpserver.Options{})
		if err != nil && strings.Contains(err.Error(), "http(s) URL") {
			return cli.CmdUsagef("mcp", "--server %q: give an http(s) URL such as http://127.0.0.1:8080", *server)
		}
		return err
	}
}

// ReadKeyFile reads a file that holds an API key alone: one word, spaces
// and a final newline around it allowed. Its errors never hold the key.
func ReadKeyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read key file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("read key file: %w", err)
	}
	if len(b) > maxKeyFile {
		return "", errors.New("read key file: over 4 KiB: it must hold the key alone")
	}
	fields := strings.Fields(string(b))
	switch len(fields) {
	case 0:
		return "", errors.New("read key file: it is empty: it must hold the API key")
	case 1:
		return fields[0], nil
	}
	return "", errors.New("read key file: it holds more than one word: it must hold the API key alone (not the serve's NAME KEY lines)")
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
