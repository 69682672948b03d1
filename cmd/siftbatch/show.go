package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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
	Lease         int64              `json:"lease"`
	ResultBytes   int64              `json:"result_bytes"`
	Targets       []storedTargetJSON `json:"targets"`
}

// storedTargetJSON is a stored target as show prints it.
type storedTargetJSON struct {
	Idx     int             `json:"idx"`
	URL     string          `json:"url"`
	Options json.RawMessage `json:"options,omitempty"`
	Status  string          `json:"status"`
	Error   string          `json:"error,omitempty"`
	Hint    string          `json:"hint,omitempty"`
	Result  *engine.Result  `json:"result,omitempty"`
}

// runShow is the show command: one stored job and its targets as JSON.
func runShow(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("show", "show [--data DIR] [--results] ID",
		"Print one stored job and its targets as JSON. The store must not be in use by\na running serve.")
	data := fs.String("data", defaultDataDir, "store directory")
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
		Lease:         j.Lease / 1e9,
		ResultBytes:   j.ResultBytes,
		Targets:       make([]storedTargetJSON, 0, len(targets)),
	}
	for _, t := range targets {
		st := storedTargetJSON{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error, Hint: t.Hint}
		if json.Valid(t.Options) && string(t.Options) != "{}" {
			st.Options = t.Options
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
