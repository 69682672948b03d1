package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// errHelpShown is returned by a command whose --help was asked for: the
// usage has been printed and the process exits 0.
var errHelpShown = errors.New("help shown")

// usageError is a mistake in the command line. It exits 2 with a hint:
// the --help of cmd, the command it is about, or the list of commands.
type usageError struct {
	cmd string
	msg string
}

func (e *usageError) Error() string { return e.msg }

// hint is the line that follows a usage error.
func (e *usageError) hint() string {
	if e.cmd == "" {
		return `run "siftbatch help" for the commands`
	}
	return fmt.Sprintf(`run "siftbatch %s --help" for its flags`, e.cmd)
}

// usageErrorf is a usage error of the command line as a whole.
func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// cmdUsageErrorf is a usage error of the command cmd; its message starts
// with "cmd: ".
func cmdUsageErrorf(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: cmd + ": " + fmt.Sprintf(format, args...)}
}

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
	fmt.Fprintln(w, `Run "siftbatch COMMAND --help" for a command's flags.`)
}

// runHelp lists the commands, or with a command name prints that command's
// flags.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		printUsage(stdout)
		return nil
	}
	if len(args) > 1 {
		return usageErrorf("help takes at most one command name")
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
	return usageErrorf("unknown command %q", args[0])
}

// newFlagSet returns a flag set for one command. Its usage text, printed on
// --help, is synopsis and description followed by the flags.
func newFlagSet(name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: siftbatch %s\n\n%s\n", synopsis, description)
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(w)
		if b.Len() > 0 {
			fmt.Fprintf(w, "\nFlags:\n%s", b.String())
		}
	}
	return fs
}

// parseFlags parses args with fs, allowing flags after positional
// arguments ("show ID --results"), and returns the positional ones. On
// --help it prints the usage to stdout and returns errHelpShown; a bad flag
// is a usage error.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(stdout)
				fs.Usage()
				return nil, errHelpShown
			}
			return nil, cmdUsageErrorf(fs.Name(), "%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// noArgs is for commands that take flags only.
func noArgs(fs *flag.FlagSet, positional []string) error {
	if len(positional) > 0 {
		return cmdUsageErrorf(fs.Name(), "unexpected argument %q", positional[0])
	}
	return nil
}
