package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
)

// Log keys. Every attribute the command logs uses one of these; none of them
// ever holds a URL, a host, an API key or a panic value.
const (
	logKeyAddr    = "addr"
	logKeyErr     = "err"
	logKeyWorkers = "workers"
)

// newLogger returns a text logger on w at the named level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, cli.CmdUsagef("serve", "--log-level must be debug, info, warn or error (got %q)", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// errAttr logs an error's text. Only errors that cannot carry a URL are
// logged this way (the fetcher's never are).
func errAttr(err error) slog.Attr { return slog.String(logKeyErr, fmt.Sprint(err)) }
