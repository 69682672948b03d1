// Package bars draws the demos' live progress bars on a terminal (mpb):
// [Jobs], one bar per job, as many as the terminal's height allows; and
// [Live], bars whose lines the caller writes, with messages printed above
// them.
//
// Their methods are safe for concurrent use.
package bars

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/vbauerster/cupwriter"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// MinWidth is the narrowest terminal the bars are drawn on.
const MinWidth = 60

// Reserve is the rows kept free of bars: the header above them, the "+N
// more" line, and room for the prompt.
const Reserve = 5

// Fit reports whether w is a terminal, as the progress bars see it, wide
// enough for them, and how many rows it has (0 if unknown). A terminal of
// unknown width (0) gets plain lines.
func Fit(w io.Writer) (bool, int) {
	cw := cupwriter.New(w, false)
	if !cw.IsTerminal() {
		return false, 0
	}
	width, height, err := cw.GetTermSize()
	return err == nil && width >= MinWidth, height
}

// Job is a job as [NewJobs] draws it: its label, and its number of targets.
type Job struct {
	Label string
	Total int
}

// Jobs shows one live progress bar per job, as many as the terminal's
// height allows, then one line for the rest ("+N more jobs").
type Jobs struct {
	w     io.Writer
	p     *mpb.Progress
	bars  []*mpb.Bar // one per job shown
	notes []atomic.Pointer[string]
	more  *mpb.Bar // the line for the jobs not shown, or nil
	rest  []atomic.Int64
}

// NewJobs draws bars for js on w, a terminal of height rows (0: unknown, no
// limit); note is each bar's text until its first Update.
func NewJobs(w io.Writer, js []Job, height int, note string) *Jobs {
	shown := len(js)
	if height > 0 && shown > max(height-Reserve, 1) {
		shown = max(height-Reserve, 1)
	}
	v := &Jobs{
		w:     w,
		p:     mpb.New(mpb.WithOutput(w), mpb.WithWidth(32), mpb.WithRefreshRate(100*time.Millisecond)),
		bars:  make([]*mpb.Bar, shown),
		notes: make([]atomic.Pointer[string], shown),
	}
	for i, j := range js[:shown] {
		v.notes[i].Store(&note)
		v.bars[i] = v.p.AddBar(int64(j.Total),
			mpb.PrependDecorators(
				decor.Name(j.Label, decor.WCSyncSpaceR),
				decor.CountersNoUnit("%d/%d", decor.WCSyncSpace),
			),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return *v.notes[i].Load() })),
		)
	}
	if rest := js[shown:]; len(rest) > 0 {
		total := 0
		for _, j := range rest {
			total += j.Total
		}
		v.rest = make([]atomic.Int64, len(rest))
		jobs := "jobs"
		if len(rest) == 1 {
			jobs = "job"
		}
		v.more = v.p.New(int64(total), mpb.NopStyle(),
			mpb.PrependDecorators(decor.Any(func(s decor.Statistics) string {
				return fmt.Sprintf("+%d more %s: %d/%d targets", len(rest), jobs, s.Current, s.Total)
			})),
		)
	}
	return v
}

// Shown is how many jobs have a bar of their own; the others share the
// "+N more" line.
func (v *Jobs) Shown() int { return len(v.bars) }

// Update shows job i's progress: done of total targets, a note beside its
// bar, and whether it has ended (a job ended short of its total loses its
// bar).
func (v *Jobs) Update(i, done, total int, note string, ended bool) {
	if i >= len(v.bars) {
		v.rest[i-len(v.bars)].Store(int64(done))
		sum := int64(0)
		for k := range v.rest {
			sum += v.rest[k].Load()
		}
		v.more.SetCurrent(sum)
		return
	}
	v.notes[i].Store(&note)
	bar := v.bars[i]
	if ended && done < total {
		bar.Abort(false)
		return
	}
	bar.SetCurrent(int64(done))
}

// Finish stops drawing. Interrupted, it removes the bars from the screen,
// so that no half-drawn bar is left behind.
func (v *Jobs) Finish(interrupted bool) {
	all := v.bars
	if v.more != nil {
		all = append(all[:len(all):len(all)], v.more)
	}
	for _, b := range all {
		if interrupted || !b.Completed() {
			b.Abort(interrupted)
		}
	}
	v.p.Wait()
	if !interrupted {
		fmt.Fprintln(v.w)
	}
}
