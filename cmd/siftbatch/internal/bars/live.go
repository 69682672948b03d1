package bars

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Live shows a bar per item whose text the caller's functions give, and
// messages printed above the bars.
type Live struct {
	p *mpb.Progress

	mu   sync.Mutex
	bars []*mpb.Bar
	done atomic.Bool
}

// NewLive draws on w, refreshed every refresh.
func NewLive(w io.Writer, refresh time.Duration) *Live {
	return &Live{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(20), mpb.WithRefreshRate(refresh))}
}

// Add adds a bar with name before it and note after it, each called at
// every refresh, and returns its index for Set. Its total is 0 until Set:
// it never completes by itself; Finish ends it.
func (v *Live) Add(name, note func() string) int {
	bar := v.p.AddBar(0,
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return name() }, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return note() })),
	)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.bars = append(v.bars, bar)
	return len(v.bars) - 1
}

// Set shows done of total on bar i; a total of 0 changes nothing.
func (v *Live) Set(i, done, total int) {
	if total <= 0 {
		return
	}
	v.mu.Lock()
	bar := v.bars[i]
	v.mu.Unlock()
	bar.SetTotal(int64(total), false)
	bar.SetCurrent(int64(done))
}

// Print prints a line above the bars; after Finish it prints nothing.
func (v *Live) Print(line string) {
	if v.done.Load() {
		return
	}
	_, _ = fmt.Fprintln(v.p, line)
}

// Finish stops drawing; failed, it removes the bars from the screen.
func (v *Live) Finish(failed bool) {
	v.done.Store(true)
	v.mu.Lock()
	for _, b := range v.bars {
		b.Abort(failed)
	}
	v.mu.Unlock()
	v.p.Wait()
}
