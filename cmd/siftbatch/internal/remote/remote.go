// Package remote is the siftbatch commands that talk to a running serve
// through its batch API, on package github.com/sift/batch/engine/client:
// submit, get, wait, ls and cancel. Each takes --server URL (default
// http://127.0.0.1:8080, serve's own default) and --key-file FILE (a file
// that holds the API key alone), and prints text for a person or, with
// --json, the API's JSON. Each writes its answer to stdout, and notes and
// wait's progress bar to stderr; submit --targets - reads os.Stdin. Package
// main wires each to its name.
//
// Its functions are safe for concurrent use.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/client"
)

// DefaultServer is --server's default: serve's default address.
const DefaultServer = "http://127.0.0.1:8080"

// maxKeyFile caps the bytes of a key file read: a key is far shorter.
const maxKeyFile = 4 << 10

// conn is the flags every command takes: where the server is, the key's
// file, and --json.
type conn struct {
	cmd     string
	server  *string
	keyFile *string
	json    *bool
}

// addConn adds --server, --key-file and --json to fs.
func addConn(fs *flag.FlagSet) *conn {
	return &conn{
		cmd:     fs.Name(),
		server:  fs.String("server", DefaultServer, "the serve to talk to: its base URL (http:// if none given)"),
		keyFile: fs.String("key-file", "", "file that holds the API key alone (required)"),
		json:    fs.Bool("json", false, "print the API's JSON instead of text"),
	}
}

// client is the client of the flags' server, with the key from the key
// file. Each wait before a retry (a 429 or 503) is told on stderr, in one
// line: why, and when it tries again. opts are more options.
func (c *conn) client(stderr io.Writer, opts ...client.Option) (*client.Client, error) {
	if *c.keyFile == "" {
		return nil, cli.CmdUsagef(c.cmd, "--key-file is required: a file that holds the API key alone")
	}
	key, err := ReadKeyFile(*c.keyFile)
	if err != nil {
		return nil, err
	}
	server := *c.server
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	opts = append([]client.Option{client.WithOnRetry(func(r client.Retry) { fmt.Fprintln(stderr, retryNote(c.cmd, r, time.Now())) })}, opts...)
	cl, err := client.New(server, key, opts...)
	if err != nil {
		return nil, cli.CmdUsagef(c.cmd, "--server %q: want an http or https URL, with a port from 1 to 65535 if any, such as %s", *c.server, DefaultServer)
	}
	return cl, nil
}

// retryNote is the line a command prints before it waits to retry: the
// server's answer (status, error, hint), how long it waits and until when,
// and which attempt follows. submit's says how not to wait.
func retryNote(cmd string, r client.Retry, now time.Time) string {
	wait := r.Wait.Round(100 * time.Millisecond)
	s := fmt.Sprintf("siftbatch %s: the server answered %v; trying again in %s, at %s (attempt %d of %d)",
		cmd, r.Err, wait, now.Add(r.Wait).Format(time.TimeOnly), r.Attempt, r.MaxAttempts)
	if cmd == "submit" {
		s += "; --no-retry answers at once"
	}
	return cleanCell(s)
}

// explain adds a hint to an error a person can act on: a refused
// connection (no serve at --server), a server that sent no answer.
func explain(err error) error {
	var ue *url.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ECONNREFUSED):
		where := "that address"
		if errors.As(err, &ue) {
			if u, perr := url.Parse(ue.URL); perr == nil {
				where = u.Host
			}
		}
		return cli.WithHint(err, fmt.Sprintf("hint: nothing listens at %s: is siftbatch serve running there? --server names the serve to talk to (default %s)", where, DefaultServer))
	}
	return err
}

// ReadKeyFile reads an API key from a file that holds it alone (a
// trailing newline, CRLF, spaces around it, or a UTF-8 byte order mark
// before it, as some editors save a file, are fine). A key with a space
// inside, ASCII or not (unicode.IsSpace: U+00A0, U+3000…), is more than
// the key; one with another character that is not printable (a control or
// format character such as U+200B) is refused too. Its errors never hold
// the file's content.
func ReadKeyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("key file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("key file %s: %w", path, err)
	}
	key := strings.TrimSpace(strings.TrimPrefix(string(b), "\ufeff"))
	switch {
	case len(b) > maxKeyFile:
		return "", fmt.Errorf("key file %s: more than %d bytes; it must hold the API key alone", path, maxKeyFile)
	case key == "":
		return "", fmt.Errorf("key file %s is empty; it must hold the API key alone", path)
	case strings.ContainsFunc(key, unicode.IsSpace):
		return "", fmt.Errorf("key file %s: holds more than one word (a space or a line break inside); it must hold the API key alone (not a serve --keys line)", path)
	case !utf8.ValidString(key) || strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }):
		return "", fmt.Errorf("key file %s: holds a character that is not printable (a control or an invisible format character); it must hold the API key alone", path)
	}
	return key, nil
}

// printJSON prints v as indented JSON, without HTML escaping (page text
// keeps its "<").
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printLine prints v as one line of JSON.
func printLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// summary is a job's one-line summary:
// "job ID: partial, 2 of 2 stored, 1 failed, created 2026-01-02 03:04:05Z";
// a job that ended with targets that never ran counts them, so that the
// counts add up: "job ID: failed, 1 of 3 stored, 0 failed, 2 not run,
// created … (restart)".
func summary(j client.Job) string {
	notRun := ""
	if n := j.NotRun(); n > 0 {
		notRun = fmt.Sprintf(", %d not run", n)
	}
	s := fmt.Sprintf("job %s: %s, %d of %d stored, %d failed%s, created %s", j.ID, j.Status,
		j.TargetsDone, j.TargetsTotal, j.TargetsFailed, notRun, j.Created().UTC().Format(time.DateTime)+"Z")
	if j.Error != "" {
		s += " (" + j.Error + ")"
	}
	return cleanCell(s)
}

// cleanText makes page text safe to print on a terminal: every control
// character but newline and tab (an escape sequence's ESC, a carriage
// return, C1 controls) becomes U+FFFD, so that a page cannot move the
// cursor, recolour or retitle the terminal. --json prints text as it is,
// escaped by JSON.
func cleanText(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f {
			return '\uFFFD'
		}
		return r
	}, s)
}

// cleanCell is cleanText for a table cell or a line: newlines and tabs
// become spaces.
func cleanCell(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		return r
	}, cleanText(s))
}

// oneID checks that pos is one job id.
func oneID(cmd string, pos []string) (string, error) {
	if len(pos) != 1 || pos[0] == "" {
		return "", cli.CmdUsagef(cmd, "want one job ID")
	}
	return pos[0], nil
}

// interrupted reports whether err is ctx's end by an interrupt.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}
