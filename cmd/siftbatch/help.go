package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/remote"
)

// printUsage prints the list of commands.
func printUsage(w io.Writer) {
	fmt.Fprintln(w, "siftbatch runs batch fetch jobs on an embedded, store-backed runner.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintln(w, "  siftbatch COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "submit, get, wait, ls and cancel talk to a running serve through its API:\n"+
		"--server URL (default "+remote.DefaultServer+") and --key-file FILE, a file that\n"+
		"holds your API key alone; --json prints the API's JSON.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "siftbatch COMMAND --help" for a command's flags, "siftbatch --version" for`)
	fmt.Fprintln(w, "the version and revision it was built from.")
}

// runHelp lists the commands, or with a command name prints that command's
// flags.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		printUsage(stdout)
		return nil
	}
	if len(args) > 1 {
		return cli.Usagef("help takes at most one command name")
	}
	for _, c := range commands {
		if c.name == args[0] && c.name != "help" {
			return c.run(ctx, []string{"--help"}, stdout, stderr)
		}
	}
	if args[0] == "help" {
		printUsage(stdout)
		return nil
	}
	return cli.Usagef("unknown command %q", args[0])
}
