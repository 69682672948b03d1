// Command siftbatch runs siftbatch's batch runner from the command line: a
// live demo, the HTTP API that sift exposes, two commands that inspect a
// store directory, and the commands that talk to a running serve through
// its API (submit, get, wait, ls, cancel).
//
// Usage:
//
//	siftbatch COMMAND [flags]
//
// Run "siftbatch help" for the commands and "siftbatch COMMAND --help" for a
// command's flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/fetcher"
)

// Exit codes. An interrupt (SIGINT, SIGTERM) after which the command has
// stopped cleanly exits exitOK: make demo, stopped with Ctrl-C, is no error.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	fetcher.RunFilterChild() // a filter process of serve's fetcher runs here, and exits
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// command is one subcommand: its name, a one-line summary for help, and the
// function that runs it with the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands in the order help shows them. It is set in
// init because help refers to it.
var commands []command

func init() {
	commands = []command{
		{"demo", "run a live demo on a temporary store, nothing to set up", runDemo},
		{"demo-cluster", "run three serve --cluster processes on loopback, kill one, bring it back", runDemoCluster},
		{"serve", "serve the batch HTTP API", runServe},
		{"cluster-certs", "write a cluster's CA and each node's certificate and key (serve --cluster's TLS)", runClusterCerts},
		{"jobs", "list the jobs in a store directory", runJobs},
		{"show", "print one stored job and its targets as JSON", runShow},
		{"submit", "submit URLs to a running serve as one job (--server, --key-file)", runSubmit},
		{"get", "print a job of yours on a running serve, its targets and results", runGet},
		{"wait", "wait for a job of yours on a running serve to end, with a progress bar", runWait},
		{"ls", "list your jobs on a running serve, newest first", runLs},
		{"cancel", "cancel a live job of yours on a running serve", runCancel},
		{"mcp", "serve the batch API as MCP tools over stdio, calling a running serve (--server, --key-file)", runMCP},
		{"help", "list the commands, or show one command's flags", runHelp},
	}
}

// Run runs the command named by args[0] with the rest of args. It writes
// what the command prints to stdout and diagnostics to stderr; ctx being
// cancelled (Ctrl-C) stops a long-running command cleanly.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return cli.Usagef("no command given")
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		printUsage(stdout)
		return nil
	case "--version", "-version", "version":
		_, err := fmt.Fprintln(stdout, cli.Version())
		return err
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	return cli.Usagef("unknown command %q", name)
}

// report prints err to stderr in one line (with a hint for usage errors
// and a [cli.HintError]) and returns the process exit code for it. A command returns ctx's error only
// once it has stopped cleanly (a failed stop is an error of its own): an
// interrupt is then no failure.
func report(err error, stderr io.Writer) int {
	var ue *cli.UsageError
	switch {
	case err == nil, errors.Is(err, cli.ErrHelpShown):
		return exitOK
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "siftbatch: interrupted; stopped cleanly")
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "siftbatch: %v\n", err)
		fmt.Fprintln(stderr, ue.Hint())
		return exitUsage
	default:
		fmt.Fprintf(stderr, "siftbatch: %v\n", err)
		if hint := cli.HintOf(err); hint != "" {
			fmt.Fprintln(stderr, hint)
		}
		return exitError
	}
}
