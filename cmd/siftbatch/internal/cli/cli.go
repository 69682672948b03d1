// Package cli is the plumbing every siftbatch subcommand shares: usage
// errors and their hints, flag sets whose --help prints a synopsis, and the
// opening of a store directory with errors a person can act on.
//
// Its functions are safe for concurrent use; a flag set is not.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ErrHelpShown is returned by a command whose --help was asked for: the
// usage has been printed and the process exits 0.
var ErrHelpShown = errors.New("help shown")

// UsageError is a mistake in the command line. The command exits 2 with a
// hint ([UsageError.Hint]): the --help of Cmd, the command it is about, or
// the list of commands when Cmd is "".
type UsageError struct {
	Cmd string
	Msg string
}

func (e *UsageError) Error() string { return e.Msg }

// Hint is the line that follows a usage error.
func (e *UsageError) Hint() string {
	if e.Cmd == "" {
		return `run "siftbatch help" for the commands`
	}
	return fmt.Sprintf(`run "siftbatch %s --help" for its flags`, e.Cmd)
}

// Usagef is a usage error of the command line as a whole.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// CmdUsagef is a usage error of the command cmd; its message starts with
// "cmd: ".
func CmdUsagef(cmd, format string, args ...any) error {
	return &UsageError{Cmd: cmd, Msg: cmd + ": " + fmt.Sprintf(format, args...)}
}

// NewFlagSet returns a flag set for one command. Its usage text, printed on
// --help, is synopsis and description followed by the flags.
func NewFlagSet(name, synopsis, description string) *flag.FlagSet {
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

// ParseFlags parses args with fs, allowing flags after positional
// arguments ("show ID --results"), and returns the positional ones. On
// --help it prints the usage to stdout and returns [ErrHelpShown]; a bad
// flag is a usage error.
func ParseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(stdout)
				fs.Usage()
				return nil, ErrHelpShown
			}
			return nil, CmdUsagef(fs.Name(), "%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// ParseNoArgs is [ParseFlags] for a command that takes flags only: a
// positional argument is a usage error.
func ParseNoArgs(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	pos, err := ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return CmdUsagef(fs.Name(), "unexpected argument %q", pos[0])
	}
	return nil
}

// Plural returns one for n == 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
