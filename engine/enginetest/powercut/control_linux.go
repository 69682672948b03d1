//go:build linux

package powercut

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// control is the FIFO of Options.ControlPath and the goroutine that reads
// its commands.
type control struct {
	path    string
	made    bool // Mount made the FIFO: it removes it
	f       *os.File
	stopped chan struct{}
}

// openControl makes (or reuses) the FIFO at path (outside the mount and
// the backing directory: Mount checks) and opens it for reading. It is opened read-write, so that
// it neither blocks until a writer comes nor reads end-of-file when one
// goes: commands may come from any number of writers, one after another.
func openControl(path string) (*control, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("powercut: control: %w", err)
	}
	c := &control{path: path, stopped: make(chan struct{})}
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := unix.Mkfifo(path, 0o600); err != nil {
			return nil, fmt.Errorf("powercut: control: %w", err)
		}
		c.made = true
	case err != nil:
		return nil, fmt.Errorf("powercut: control: %w", err)
	case st.Mode()&os.ModeNamedPipe == 0:
		return nil, fmt.Errorf("powercut: control: %s exists and is not a FIFO", path)
	}
	c.f, err = os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if c.made {
			_ = os.Remove(path)
		}
		return nil, fmt.Errorf("powercut: control: %w", err)
	}
	return c, nil
}

// start reads commands until close.
func (c *control) start(f *FS) {
	go func() {
		defer close(c.stopped)
		sc := bufio.NewScanner(c.f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			end, err := f.command(line)
			if err != nil {
				f.logf("powercut: control: %q: %v", line, err)
			} else {
				f.logf("powercut: control: %q done", line)
			}
			if end {
				return
			}
		}
	}()
}

// close stops the reader (its read returns) and removes the FIFO if Mount
// made it.
func (c *control) close() {
	_ = c.f.Close()
	if c.made {
		_ = os.Remove(c.path)
	}
}

// wait waits for the reader to stop.
func (c *control) wait() { <-c.stopped }

// command runs one command of the control file; end reports that it ended
// the file system.
func (f *FS) command(line string) (end bool, err error) {
	verb, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch verb {
	case "cut":
		mode := DropAll
		switch arg {
		case "", "all":
		case "random":
			mode = DropRandom
		case "tear":
			mode = TearLast
		default:
			return false, fmt.Errorf("unknown cut mode %q (all, random, tear)", arg)
		}
		return true, f.end(true, mode, true)
	case "unmount":
		if err := f.end(false, DropAll, true); err != nil {
			return false, err
		}
		return true, nil
	case "eio":
		if arg == "" {
			return false, errors.New("eio needs a file name")
		}
		f.FailNextFsync(arg)
		return false, nil
	case "eio-rate":
		p, err := strconv.ParseFloat(arg, 64)
		if err != nil || p < 0 || p > 1 {
			return false, fmt.Errorf("eio-rate needs a probability in [0, 1], not %q", arg)
		}
		f.FailFsyncs(p)
		return false, nil
	case "stats":
		f.logf("powercut: stats: %+v", f.Stats())
		return false, nil
	case "enospc":
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return false, fmt.Errorf("enospc needs a byte count, not %q", arg)
		}
		f.SetWriteBudget(n)
		return false, nil
	}
	return false, fmt.Errorf("unknown command %q", verb)
}
