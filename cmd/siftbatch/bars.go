package main

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/vbauerster/cupwriter"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/sift/batch/engine"
)

// minBarsWidth is the narrowest terminal the bars are drawn on.
const minBarsWidth = 60

// barsReserve is the rows kept free of bars: the header above them, the
// "+N more" line, and room for the prompt.
const barsReserve = 5

// barsFit reports whether w is a terminal, as the progress bars see it, wide
// enough for them, and how many rows it has (0 if unknown). A terminal of
// unknown width (0) gets plain lines.
func barsFit(w io.Writer) (bool, int) {
	cw := cupwriter.New(w, false)
	if !cw.IsTerminal() {
		return false, 0
	}
	width, height, err := cw.GetTermSize()
	return err == nil && width >= minBarsWidth, height
}

// barsView shows one live progress bar per job, as many as the terminal's
// height allows, then one line for the rest ("+N more jobs").
type barsView struct {
	w     io.Writer
	p     *mpb.Progress
	bars  []*mpb.Bar // one per job shown
	notes []atomic.Pointer[string]
	more  *mpb.Bar // the line for the jobs not shown, or nil
	rest  []atomic.Int64
}

// newBarsView draws bars for js on w, a terminal of height rows (0:
// unknown, no limit).
func newBarsView(w io.Writer, js []*demoJob, height int) *barsView {
	shown := len(js)
	if height > 0 && shown > max(height-barsReserve, 1) {
		shown = max(height-barsReserve, 1)
	}
	v := &barsView{
		w:     w,
		p:     mpb.New(mpb.WithOutput(w), mpb.WithWidth(32), mpb.WithRefreshRate(100*time.Millisecond)),
		bars:  make([]*mpb.Bar, shown),
		notes: make([]atomic.Pointer[string], shown),
	}
	for i, d := range js[:shown] {
		note := engine.StatusQueued
		v.notes[i].Store(&note)
		v.bars[i] = v.p.AddBar(int64(len(d.kinds)),
			mpb.PrependDecorators(
				decor.Name(d.label, decor.WCSyncSpaceR),
				decor.CountersNoUnit("%d/%d", decor.WCSyncSpace),
			),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return *v.notes[i].Load() })),
		)
	}
	if rest := js[shown:]; len(rest) > 0 {
		total := 0
		for _, d := range rest {
			total += len(d.kinds)
		}
		v.rest = make([]atomic.Int64, len(rest))
		v.more = v.p.New(int64(total), mpb.NopStyle(),
			mpb.PrependDecorators(decor.Any(func(s decor.Statistics) string {
				return fmt.Sprintf("+%d more %s: %d/%d targets", len(rest), plural(len(rest), "job", "jobs"), s.Current, s.Total)
			})),
		)
	}
	return v
}

func (v *barsView) update(i int, d *demoJob) {
	if i >= len(v.bars) {
		j := i - len(v.bars)
		v.rest[j].Store(int64(d.job.TargetsDone))
		sum := int64(0)
		for k := range v.rest {
			sum += v.rest[k].Load()
		}
		v.more.SetCurrent(sum)
		return
	}
	note := d.job.Status
	if r := running(d); r != "" {
		note += ", " + r
	}
	v.notes[i].Store(&note)
	bar := v.bars[i]
	if d.terminal() && d.job.TargetsDone < d.job.TargetsTotal {
		bar.Abort(false)
		return
	}
	bar.SetCurrent(int64(d.job.TargetsDone))
}

// finish stops drawing. Interrupted, it removes the bars from the screen,
// so that no half-drawn bar is left behind.
func (v *barsView) finish(interrupted bool) {
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
