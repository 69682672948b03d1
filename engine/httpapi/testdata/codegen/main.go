// Command session is what TestAPI_OpenAPICodegenClient builds, in a module
// of its own, with the client oapi-codegen generated from the API's
// OpenAPI document (package batchclient, beside it): a submit, a wait, the
// results. It prints one JSON line of what it read, and exits 1 on any
// answer it did not expect.
//
// Usage: session BASE_URL KEY URL...
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"codegentest/batchclient"
)

// report is what the session read, printed as JSON.
type report struct {
	ID       string   `json:"id"`
	Reused   bool     `json:"reused"`
	Location string   `json:"location"`
	Again    string   `json:"again"`
	Polls    int      `json:"polls"`
	Status   string   `json:"status"`
	Contents []string `json:"contents"` // each done target's result, in idx order
	Failed   []string `json:"failed"`   // each failed target's hint
	Target0  string   `json:"target0"`
	Listed   bool     `json:"listed"`
	Missing  int      `json:"missing"` // the status of a job that is not there
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) < 4 {
		return fmt.Errorf("usage: session BASE_URL KEY URL...")
	}
	base, key, urls := os.Args[1], os.Args[2], os.Args[3:]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := batchclient.NewClientWithResponses(base, batchclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+key)
		return nil
	}))
	if err != nil {
		return err
	}
	var rep report

	body := batchclient.SubmitRequest{}
	for _, u := range urls {
		body.Targets = append(body.Targets, batchclient.TargetSpec{Url: u})
	}
	idem := "codegen-session-1"
	sub, err := c.SubmitWithResponse(ctx, &batchclient.SubmitParams{IdempotencyKey: &idem}, body)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if sub.JSON202 == nil || sub.Headers202 == nil {
		return fmt.Errorf("submit: %d %s", sub.StatusCode(), sub.Body)
	}
	rep.ID, rep.Reused, rep.Location = sub.JSON202.Id, sub.JSON202.Reused, sub.Headers202.Location
	if sub.JSON202.Location != rep.Location {
		return fmt.Errorf("submit: location %q, Location header %q", sub.JSON202.Location, rep.Location)
	}

	// The same key and body: the same job.
	again, err := c.SubmitWithResponse(ctx, &batchclient.SubmitParams{IdempotencyKey: &idem}, body)
	if err != nil || again.JSON202 == nil {
		return fmt.Errorf("submit again: %v %d %s", err, again.StatusCode(), again.Body)
	}
	rep.Again = again.JSON202.Id

	// Wait: long-polls until the job has ended.
	wait := "30s"
	for {
		rep.Polls++
		j, err := c.GetJobWithResponse(ctx, rep.ID, &batchclient.GetJobParams{Wait: &wait})
		if err != nil || j.JSON200 == nil {
			return fmt.Errorf("wait: %v %d %s", err, j.StatusCode(), j.Body)
		}
		if s := j.JSON200.Status; s != batchclient.JobStatus("queued") && s != batchclient.JobStatus("running") {
			break
		}
	}

	// The results.
	with := batchclient.GetJobParamsResults("1")
	j, err := c.GetJobWithResponse(ctx, rep.ID, &batchclient.GetJobParams{Results: &with})
	if err != nil || j.JSON200 == nil {
		return fmt.Errorf("results: %v %d %s", err, j.StatusCode(), j.Body)
	}
	rep.Status = string(j.JSON200.Status)
	for _, t := range j.JSON200.Targets {
		switch {
		case t.Result != nil:
			rep.Contents = append(rep.Contents, t.Result.Content)
		case t.Hint != nil:
			rep.Failed = append(rep.Failed, *t.Hint)
		}
	}
	t0, err := c.GetTargetWithResponse(ctx, rep.ID, 0, nil)
	if err != nil || t0.JSON200 == nil || t0.JSON200.Result == nil {
		return fmt.Errorf("target 0: %v %d %s", err, t0.StatusCode(), t0.Body)
	}
	rep.Target0 = t0.JSON200.Result.Content

	list, err := c.ListJobsWithResponse(ctx, &batchclient.ListJobsParams{})
	if err != nil || list.JSON200 == nil {
		return fmt.Errorf("list: %v %d %s", err, list.StatusCode(), list.Body)
	}
	for _, s := range list.JSON200.Jobs {
		rep.Listed = rep.Listed || s.Id == rep.ID
	}
	missing, err := c.GetJobWithResponse(ctx, "00112233445566778899aabbccddeeff", nil)
	if err != nil || missing.JSON404 == nil {
		return fmt.Errorf("missing job: %v %d %s", err, missing.StatusCode(), missing.Body)
	}
	rep.Missing = missing.StatusCode()
	return json.NewEncoder(os.Stdout).Encode(rep)
}
