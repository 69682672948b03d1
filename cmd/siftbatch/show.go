package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// storedJobJSON is a stored job as show prints it: the API's fields, with
// the API's names and types (times in unix seconds), and the ones only the
// store knows (caller, lease, result_bytes, each target's options).
type storedJobJSON struct {
	ID            string             `json:"id"`
	Caller        string             `json:"caller"`
	Status        string             `json:"status"`
	Error         string             `json:"error,omitempty"`
	TargetsTotal  int                `json:"targets_total"`
	TargetsDone   int                `json:"targets_done"`
	TargetsFailed int                `json:"targets_failed"`
	CreatedAt     int64              `json:"created_at"`
	StartedAt     int64              `json:"started_at,omitempty"`
	EndedAt       int64              `json:"ended_at,omitempty"`
	DurationMS    int64              `json:"duration_ms,omitempty"`
	Lease         int64              `json:"lease"`
	ResultBytes   int64              `json:"result_bytes"`
	Targets       []storedTargetJSON `json:"targets"`
}

// storedTargetJSON is a stored target as show prints it.
type storedTargetJSON struct {
	Idx     int             `json:"idx"`
	URL     string          `json:"url"`
	Options *engine.Options `json:"options,omitempty"`
	Status  string          `json:"status"`
	Error   string          `json:"error,omitempty"`
	Hint    string          `json:"hint,omitempty"`
	// DurationMS is the fetch's time in milliseconds, rounded up, as the
	// API gives it; StoredAt when the outcome was stored, unix seconds.
	DurationMS int64          `json:"duration_ms,omitempty"`
	StoredAt   int64          `json:"stored_at,omitempty"`
	Result     *engine.Result `json:"result,omitempty"`
}

// jobDurationMS is how long j ran, Ended − Started, as the API's job
// duration_ms; 0 when either is unknown.
func jobDurationMS(j *persistence.JobRecord) int64 {
	if j.Started <= 0 || j.Ended < j.Started {
		return 0
	}
	return durationMS(time.Duration(j.Ended - j.Started))
}

// durationMS is d in whole milliseconds, rounded up, as the API's
// duration_ms (engine/httpapi); 0 for d ≤ 0 (unknown).
func durationMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// runShow is the show command: one stored job and its targets as JSON.
func runShow(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("show", "show [--data DIR] [--results] ID",
		"Print one stored job and its targets as JSON. ID is a job's whole id, or the\nstart of one (at least 4 hex digits): of its short id, the one the dashboard\nshows (its first 8 digits, or digits 9 to 16 for a job of a cluster node, whose\nids begin with the node's tag), or of more than 8 digits of the whole id. A start that more than one job\nhas lists them and fails. The store must not be in use by a running serve.")
	data := fs.String("data", cli.DefaultDataDir, "store directory")
	results := fs.Bool("results", false, "include each target's result")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.CmdUsagef("show", "want one job ID")
	}
	id := pos[0]
	store, err := cli.OpenForInspection(*data)
	if err != nil {
		return err
	}
	defer store.Close()
	if id, err = resolveID(store, id, *data); err != nil {
		return err
	}
	j, targets, err := store.JobWithTargets(id)
	if errors.Is(err, persistence.ErrNotFound) {
		return fmt.Errorf("no job %s in %s", id, *data)
	}
	if err != nil {
		return err
	}
	out := storedJobJSON{
		ID:            j.ID,
		Caller:        j.Caller,
		Status:        j.Status,
		Error:         j.Error,
		TargetsTotal:  j.TargetsTotal,
		TargetsDone:   j.TargetsDone,
		TargetsFailed: j.TargetsFailed,
		CreatedAt:     j.Created / 1e9,
		StartedAt:     j.Started / 1e9,
		EndedAt:       j.Ended / 1e9,
		DurationMS:    jobDurationMS(&j),
		Lease:         j.Lease / 1e9,
		ResultBytes:   j.ResultBytes,
		Targets:       make([]storedTargetJSON, 0, len(targets)),
	}
	for _, t := range targets {
		st := storedTargetJSON{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error,
			Hint:       cmp.Or(t.Hint, engine.NotRunHint(j.Status, j.Error, t.Status)), // as the runner reads it
			DurationMS: durationMS(t.Took), StoredAt: t.Stored / 1e9}
		// Decoded and encoded again, as the result below: options stored
		// by json.Marshal escape HTML (a grep of "<h1>").
		var o engine.Options
		if json.Unmarshal(t.Options, &o) == nil && o != (engine.Options{}) {
			st.Options = &o
		}
		if *results && t.Result != nil {
			// Decoded and encoded again: the stored JSON escapes HTML
			// ("\u003ch1\u003e"), which show does not.
			var res engine.Result
			if err := json.Unmarshal(t.Result, &res); err != nil {
				return fmt.Errorf("job %s target %d: stored result: %w", id, t.Idx, err)
			}
			st.Result = &res
		}
		out.Targets = append(out.Targets, st)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// resolveID returns the id of the one stored job that arg names: arg
// itself if it is not the start of an id (4 to 31 hex digits), else the
// job whose short id (as [engine.ShortID] gives it with the store's node
// tags: the first 8 digits, or digits 9 to 16 of a job of a cluster node)
// or, for more than 8 digits, whose whole id starts with it, as
// Runner.FindJobs matches. None, or more than one, is an error; the one
// for more lists them, newest first.
func resolveID(store *persistence.Store, arg, dir string) (string, error) {
	p := strings.ToLower(arg)
	if len(p) < engine.MinShortPrefix || len(p) >= 32 || strings.Trim(p, "0123456789abcdef") != "" {
		return arg, nil
	}
	tags, err := store.NodeTags()
	if err != nil {
		return "", err
	}
	tagged := make(map[string]bool, len(tags))
	for t := range tags {
		tagged[hex.EncodeToString(t[:])] = true
	}
	shortID := func(id string) string {
		if len(id) == 32 && tagged[id[:2*engine.NodeTagLen]] {
			return id[2*engine.NodeTagLen : 2*engine.NodeTagLen+engine.ShortIDLen]
		}
		return id[:min(len(id), engine.ShortIDLen)]
	}
	var found []persistence.JobRecord
	if err := store.Jobs(func(j persistence.JobRecord) bool {
		if (len(p) > engine.ShortIDLen && strings.HasPrefix(j.ID, p)) || (len(p) <= engine.ShortIDLen && strings.HasPrefix(shortID(j.ID), p)) {
			found = append(found, j)
		}
		return true
	}); err != nil {
		return "", err
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no job %s in %s", arg, dir)
	case 1:
		return found[0].ID, nil
	}
	slices.SortStableFunc(found, newestFirst)
	var b strings.Builder
	fmt.Fprintf(&b, "%d jobs in %s begin with %s; give more digits:", len(found), dir, arg)
	for _, j := range found {
		fmt.Fprintf(&b, "\n  %s  %s  %s  %s", j.ID, j.Caller, j.Status, formatNanos(j.Created))
	}
	return "", errors.New(b.String())
}
