package fetcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sift/batch/engine"
)

// SpanFilter is the span of a page's filters (jq, grep) in a traced
// fetch: a child of the runner's siftbatch.target.fetch span.
const SpanFilter = "siftbatch.target.filter"

// tracerName is the instrumentation scope of the fetcher's spans.
const tracerName = "github.com/sift/batch/engine/fetcher"

// noSpan is the span of an untraced fetch's filters.
var noSpan trace.Span = noop.Span{}

// Honours returns the names of the target options ([engine.Options]) that
// [Fetcher.Fetch] honours, as spelled in JSON: grep and jq. A handler
// should refuse the others (see
// [github.com/sift/batch/engine/httpapi.Options.Honoured]).
func (f *Fetcher) Honours() []string { return []string{"grep", "jq"} }

// Check reports whether Fetch can run t's options: grep must be an RE2
// regular expression of at most [MaxGrepLen] bytes whose compiled program
// has at most [MaxGrepInstructions] instructions, jq a jq program of at
// most [MaxJQLen] bytes and [MaxJQDepth] levels of nesting that parses and
// compiles. The lengths are checked before anything is parsed, the depth
// before the program is compiled, so that a check costs a few MiB and a
// few ms at most. Its error is the parser's message, or names the limit,
// for a 422 at submit. Other options are not looked at. Safe for
// concurrent use.
func (f *Fetcher) Check(t engine.Target) error {
	if t.Options.Grep != "" {
		if _, err := compileGrep(t.Options.Grep); err != nil {
			return fmt.Errorf("grep: %w", err)
		}
	}
	if t.Options.JQ != "" {
		if _, err := compileJQ(t.Options.JQ); err != nil {
			return fmt.Errorf("jq: %w", err)
		}
	}
	return nil
}

// applyOptions runs o's jq program on the page, then keeps the lines grep
// matches, in a filter process, and notes what it did in meta. Without
// either, the page is the content, and no process is involved.
func (f *Fetcher) applyOptions(ctx context.Context, o engine.Options, body []byte, truncated bool, meta map[string]any) (string, error) {
	if o.JQ == "" && o.Grep == "" {
		return string(body), nil
	}
	if o.JQ != "" && truncated {
		return "", &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "page too large for jq",
			Hint: fmt.Sprintf("the page is larger than the %d bytes kept, so its JSON is cut; fetch it without jq", f.o.MaxBody)}
	}
	req := filterRequest{jq: o.JQ, grep: o.Grep, maxOut: f.o.MaxBody, body: body}
	// A traced fetch (the runner's fetch span in ctx) has a filter span:
	// the page's bytes in, the content's out; never the program's text.
	span := noSpan
	if parent := trace.SpanFromContext(ctx); parent.IsRecording() {
		_, span = parent.TracerProvider().Tracer(tracerName).Start(ctx, SpanFilter,
			trace.WithAttributes(attribute.Int("siftbatch.filter.in_bytes", len(body)),
				attribute.Bool("siftbatch.filter.jq", o.JQ != ""), attribute.Bool("siftbatch.filter.grep", o.Grep != "")))
	}
	defer span.End()
	resp, err := f.filters.run(ctx, req, max(f.o.MaxBody, int64(len(body))))
	if err != nil {
		span.SetStatus(codes.Error, "")
		return "", f.filterError(ctx, o, err)
	}
	if resp.err != nil {
		span.SetStatus(codes.Error, "")
		return "", resp.err
	}
	span.SetAttributes(attribute.Int("siftbatch.filter.out_bytes", len(resp.content)))
	if resp.jqOutputs >= 0 {
		meta["jq_outputs"] = int(resp.jqOutputs)
	}
	if resp.grepLines >= 0 {
		meta["grep_lines"] = int(resp.grepLines)
	}
	return resp.content, nil
}

// filterError turns the error of a page's filters that did not answer into
// the target's: a done ctx is a stopped fetch; a process that was killed,
// or died, for a limit names it: memory only when its cgroup counted a kill
// for memory, or (under RLIMIT_AS) its own last words say it ran out; any
// other death is "filters failed".
func (f *Fetcher) filterError(ctx context.Context, o engine.Options, err error) error {
	if ctx.Err() != nil {
		return f.classify(ctx, ctx.Err())
	}
	who := "jq"
	switch {
	case o.JQ == "":
		who = "grep"
	case o.Grep != "":
		who = "jq and grep"
	}
	timeout, cpu := f.filters.timeout, time.Duration(f.filters.cpu)*time.Second
	var end *filterEnd
	switch {
	case errors.Is(err, errPoolClosed), errors.As(err, &end) && end.why == killClosed:
		return &engine.TargetError{Status: http.StatusServiceUnavailable, Msg: "fetch stopped", Hint: "the server stopped while this target was filtered; submit the job again"}
	case errors.Is(err, errSlowStart):
		return &engine.TargetError{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("filters unavailable: the filter process did not start within %s", startTimeout),
			Hint: "the server is too busy to start its filter process; submit the target again later"}
	case errors.Is(err, errNotReady), errors.Is(err, errNoHook):
		return &engine.TargetError{Status: http.StatusInternalServerError, Msg: "filters unavailable: the program does not call fetcher.RunFilterChild at the top of main",
			Hint: "this server cannot run jq and grep: fetch without them, and tell its operator"}
	case end == nil:
		return &engine.TargetError{Status: http.StatusInternalServerError, Msg: "filters unavailable",
			Hint: "the server could not start its filter process; fetch without jq and grep, or try again later"}
	case end.why == killDeadline:
		return &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: fmt.Sprintf("%s ran longer than %s", who, timeout),
			Hint: fmt.Sprintf("jq and grep together may run for %s on one page; make %s do less", timeout, who)}
	case end.why == killBroken:
		// garbage on its output: the generic error below
	case end.code == childExitCPU || cpuSignal(end.signal):
		return &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: fmt.Sprintf("%s used more than %s of CPU time", who, cpu),
			Hint: fmt.Sprintf("jq and grep together may use %s of CPU time on one page; make %s do less", cpu, who)}
	case end.oom || oomText(end.stderr):
		return &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: fmt.Sprintf("%s used more than %s of memory", who, sizeText(f.o.FilterMemory)),
			Hint: fmt.Sprintf("jq and grep together may use %s of memory on one page; make %s build smaller values", sizeText(f.o.FilterMemory), who)}
	default:
		// Killed by a signal we did not send (kill -9 from outside, a
		// system out of memory), or a crash: no limit of ours was passed.
		return &engine.TargetError{Status: http.StatusInternalServerError, Msg: "filters failed",
			Hint: "the filter process died while it filtered this page, not for a limit of this target's; submit the target again, or fetch without jq and grep"}
	}
	return &engine.TargetError{Status: http.StatusInternalServerError, Msg: "filters failed",
		Hint: "the filter process answered with garbage; try again, or fetch without jq and grep"}
}

// sizeText spells n bytes in MiB when it is a whole number of them.
func sizeText(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
