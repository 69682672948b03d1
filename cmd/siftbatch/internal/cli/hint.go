package cli

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
)

// HintError is an error with a hint: what to do about it, printed on a
// line of its own after the error. The process exits 1.
type HintError struct {
	Err  error
	Hint string
}

func (e *HintError) Error() string { return e.Err.Error() }

func (e *HintError) Unwrap() error { return e.Err }

// WithHint returns err with hint; nil for a nil err.
func WithHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &HintError{Err: err, Hint: hint}
}

// HintOf returns the hint of err's first [HintError], or "".
func HintOf(err error) string {
	var he *HintError
	if errors.As(err, &he) {
		return he.Hint
	}
	return ""
}

// Version is what --version prints: the module's path and version, the
// VCS revision and time the binary was built from (and whether the tree
// had changes), and the Go version, from the build info; "unknown" for
// what the build did not record (go run, go build -buildvcs=false, a
// build outside a repository).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "siftbatch: no build information (a binary built without module support)"
	}
	return versionOf(bi)
}

// versionOf is [Version] of bi.
func versionOf(bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	rev := settings["vcs.revision"]
	switch {
	case rev == "":
		rev = "unknown (built without VCS information: go run, or -buildvcs=false)"
	case settings["vcs.modified"] == "true":
		rev += " (modified)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "siftbatch %s %s\n", bi.Main.Path, version)
	fmt.Fprintf(&b, "revision: %s\n", rev)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "commit time: %s\n", t)
	}
	fmt.Fprintf(&b, "go: %s", bi.GoVersion)
	return b.String()
}
