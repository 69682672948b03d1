// Package mcpcmd is the siftbatch mcp command: the MCP server over stdio,
// for MCP clients that launch a command, calling a serve's API with one
// key (package github.com/sift/batch/engine/mcpserver).
package mcpcmd

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/remote"
	"github.com/sift/batch/engine/mcpserver"
	"github.com/sift/batch/engine/tracing"
)

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
		server := fs.String("server", remote.DefaultServer, "the serve to call: its base URL (http:// if none given)")
		keyFile := fs.String("key-file", "", "a file that holds the API key alone (required)")
		if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
			return err
		}
		if *keyFile == "" {
			return cli.CmdUsagef("mcp", "--key-file is required: a file that holds the API key alone")
		}
		key, err := remote.ReadKeyFile(*keyFile)
		if err != nil {
			return err
		}
		if !strings.Contains(*server, "://") {
			*server = "http://" + *server
		}
		// With the standard OTEL_ variables set (see serve), each tool
		// call is a span, and the serve's spans its children.
		tr, err := tracing.FromEnv(ctx)
		if err != nil {
			return err
		}
		defer func() {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			defer cancel()
			_ = tr.Shutdown(fctx) // a span lost is no failure of the command
		}()
		err = mcpserver.ServeStdio(ctx, *server, key, nil, io.NopCloser(stdin), nopCloser{stdout}, mcpserver.Options{TracerProvider: tr.TracerProvider()})
		if err != nil && strings.Contains(err.Error(), "http(s) URL") {
			return cli.CmdUsagef("mcp", "--server %q: give an http(s) URL such as http://127.0.0.1:8080", *server)
		}
		return err
	}
}

// flushTimeout bounds the flush of the spans still queued at the end.
const flushTimeout = 5 * time.Second

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
