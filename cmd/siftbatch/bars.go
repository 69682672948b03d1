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

// barsFit reports whether w is a terminal, as the progress bars see it, wide
// enough for them. A terminal of unknown width (0) gets plain lines.
func barsFit(w io.Writer) bool {
	cw := cupwriter.New(w, false)
	if !cw.IsTerminal() {
		return false
	}
	width, _, err := cw.GetTermSize()
	return err == nil && width >= minBarsWidth
}

// barsView shows one live progress bar per job.
type barsView struct {
	w     io.Writer
	p     *mpb.Progress
	bars  []*mpb.Bar
	notes []atomic.Pointer[string]
}

func newBarsView(w io.Writer, js []*demoJob) *barsView {
	v := &barsView{
		w:     w,
		p:     mpb.New(mpb.WithOutput(w), mpb.WithWidth(32), mpb.WithRefreshRate(100*time.Millisecond)),
		bars:  make([]*mpb.Bar, len(js)),
		notes: make([]atomic.Pointer[string], len(js)),
	}
	for i, d := range js {
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
	return v
}

func (v *barsView) update(i int, d *demoJob) {
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

func (v *barsView) finish() {
	for _, b := range v.bars {
		if !b.Completed() {
			b.Abort(false)
		}
	}
	v.p.Wait()
	fmt.Fprintln(v.w)
}
