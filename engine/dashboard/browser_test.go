package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// chromiumPath returns Chromium's path, failing the test when it is not
// installed: the browser tier asked for it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SIFTBATCH_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("engine/dashboard: the browser tier needs chromium: apt-get install chromium, or set SIFTBATCH_CHROMIUM")
	return ""
}

// browserSession is a headless Chromium driven through chromedp, with
// every console error and uncaught exception it reports.
type browserSession struct {
	ctx  context.Context
	shot string // where screenshots go

	mu     sync.Mutex
	errors []string
}

// startBrowser starts a fresh headless Chromium (its own profile, no
// network but loopback use, no background traffic) at 1280×800.
func startBrowser(t *testing.T) *browserSession {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in a container
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	s := &browserSession{ctx: ctx, shot: t.TempDir()}
	// Every console message, gathered until the browser stops: the
	// subscription starts the browser.
	messages := chromedp.Console(ctx)
	gathered := make(chan struct{})
	go func() {
		defer close(gathered)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == "error" || m.IsException() {
				s.mu.Lock()
				s.errors = append(s.errors, m.String())
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		<-gathered
	})
	return s
}

// run does the steps, bounded by the kit's deadline, failing the test on
// an error.
func (s *browserSession) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, testkit.Deadline)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](t *testing.T, s *browserSession, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, testkit.Deadline)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the whole page as name.png under the test's temp dir
// (and under $SIFTBATCH_SCREENSHOTS, if set). A page caught between two
// layouts (a navigation, or an update over the event stream) has no size
// for a moment ("Cannot take screenshot with 0 width"): the screenshot is
// then taken again once the page is loaded and laid out, until the kit's
// deadline.
func (s *browserSession) screenshot(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(testkit.Deadline)
	var png []byte
	for {
		s.wait(t, "the page to be laid out for "+name, `document.readyState === 'complete' && document.documentElement.clientWidth > 0`)
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		var err error
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "0 width") {
			t.Fatalf("screenshot %s: %v", name, err)
		}
	}
	for _, dir := range []string{s.shot, os.Getenv("SIFTBATCH_SCREENSHOTS")} {
		if dir == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// poll waits until the JavaScript expression is true, failing after the
// kit's deadline.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(testkit.Deadline), chromedp.WithPollingInterval(20*time.Millisecond))
}

// click clicks the element sel selects. A live page may replace the
// element between the query and the click (an update over the event
// stream): the click is then tried again, until the kit's deadline.
func (s *browserSession) click(t *testing.T, what, sel string) {
	t.Helper()
	deadline := time.Now().Add(testkit.Deadline)
	for {
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "find node") {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// open clicks the link sel selects and waits until the JavaScript
// expression, true on the page it leads to, is: a live page may replace
// the link between the query and the click, and a click on the replaced
// element goes nowhere; so the click is tried again every 2 s, until the
// kit's deadline.
func (s *browserSession) open(t *testing.T, what, sel, expr string) {
	t.Helper()
	deadline := time.Now().Add(testkit.Deadline)
	landed := func() error {
		for {
			ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
			err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond)))
			cancel()
			// A poll the navigation cut short is started again on the new page.
			if err == nil || !(strings.Contains(err.Error(), "navigated") || strings.Contains(err.Error(), "context with specified id")) {
				return err
			}
		}
	}
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		clickErr := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		// A click that found no link may follow one that went through.
		err := landed()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v (click: %v)", what, err, clickErr)
		}
	}
}

// wait waits until the JavaScript expression is true, until the kit's
// deadline, across a navigation (a form's POST and its redirect): a poll
// that the navigation cut short is started again on the new page.
func (s *browserSession) wait(t *testing.T, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(testkit.Deadline)
	for {
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		err := chromedp.Do(ctx, poll(expr))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !(strings.Contains(err.Error(), "navigated") || strings.Contains(err.Error(), "context with specified id")) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func (s *browserSession) consoleErrors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errors...)
}

// TestDashboard_Browser drives the dashboard in headless Chromium: sign
// in, the overview updating while a job runs (no reload), the job page,
// cancel, a result, sign out, the admin's view, at desktop and phone
// width; no page logs a console error. It is the browser tier's
// (SIFTBATCH_TIER=browser, make test/browser).
func TestDashboard_Browser(t *testing.T) {
	testkit.RequireTier(t, "browser")
	b := setup(t)
	br := startBrowser(t)
	home := b.url + "/ui/"

	// Sign in through the form, with the keyboard.
	br.run(t, "sign-in form",
		chromedp.Navigate(home),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), "alice-key"+kb.Enter),
	)
	br.wait(t, "the overview", `!!document.querySelector('#live') && document.title.startsWith('Overview')`)
	br.run(t, "keyboard", chromedp.KeyEvent(kb.Tab))
	if skip := eval[string](t, br, `document.activeElement.className`); skip != "skip" {
		t.Errorf("the first Tab focuses %q, want the skip link", skip)
	}
	eval[bool](t, br, `document.activeElement.blur(), true`)

	// The overview shows a job submitted after it loaded, without a reload.
	eval[bool](t, br, `window.notReloaded = true`)
	a := b.submit(t, "alice", "https://example.com/a/hold", "https://example.com/a/ok", "https://example.com/a/fail")
	br.wait(t, "the job to appear live", fmt.Sprintf(`document.querySelector('#live').textContent.includes(%q) && !!document.querySelector('#live .b-flight')`, a[:8]))
	br.screenshot(t, "overview-desktop")

	// The job page, and cancel.
	br.click(t, "open the job", fmt.Sprintf(`a[href="/ui/jobs/%s"]`, a))
	br.wait(t, "the job page", `!!document.querySelector('#cancel') && document.querySelector('#job-status').textContent === 'running'`)
	br.screenshot(t, "job-desktop")
	br.click(t, "cancel", "#cancel")
	br.wait(t, "the job page after cancel", `!!document.querySelector('#job-status') && document.querySelector('#job-status').textContent === 'cancelled' && !document.querySelector('#cancel')`)

	// A second job runs to its end while the overview watches.
	br.run(t, "back to the overview", chromedp.Navigate(home))
	br.wait(t, "the overview", `!!document.querySelector('#live')`)
	eval[bool](t, br, `window.notReloaded = true`)
	c := b.submit(t, "alice", "https://example.com/c/hold", "https://example.com/c/ok", "https://example.com/c/fail")
	br.wait(t, "the second job to appear", fmt.Sprintf(`document.querySelector('#live').textContent.includes(%q)`, c[:8]))
	b.release()
	br.wait(t, "it to finish, live", fmt.Sprintf(`[...document.querySelectorAll('#recent-h ~ ol .job')].some(li => li.textContent.includes(%q) && li.textContent.includes('partial'))`, c[:8]))
	if !eval[bool](t, br, `window.notReloaded === true`) {
		t.Fatal("the overview reloaded instead of updating")
	}

	// A result's first bytes.
	br.run(t, "the job page", chromedp.Navigate(b.url+"/ui/jobs/"+c), chromedp.WaitVisible(chromedp.CSS(`a[href$="/1"]`)))
	br.click(t, "open a result", `a[href$="/1"]`)
	br.wait(t, "the result page", `!!document.querySelector('pre.content')`)
	if content := eval[string](t, br, `document.querySelector('pre.content').textContent`); !strings.Contains(content, "<h1>page</h1> of https://example.com/c/ok") {
		t.Fatalf("result content %q", content)
	}

	// Phone width: nothing wider than the screen.
	br.run(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)), chromedp.Navigate(b.url+"/ui/jobs/"+c))
	br.wait(t, "the job page", `!!document.querySelector('#live')`)
	br.screenshot(t, "job-phone")
	if !eval[bool](t, br, `document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("the job page is wider than a 390-px phone")
	}
	br.run(t, "phone overview", chromedp.Navigate(home))
	br.wait(t, "the overview", `!!document.querySelector('#live')`)
	br.screenshot(t, "overview-phone")
	if !eval[bool](t, br, `document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("the overview is wider than a 390-px phone")
	}

	// Sign out.
	br.run(t, "desktop width", chromedp.EmulateViewport(1280, 800))
	br.click(t, "sign out", "#signout")
	br.wait(t, "the sign-in form", `!!document.querySelector('#key')`)

	// The admin's view, in dark mode: every caller's jobs, the charts,
	// and a cancel of bob's job.
	d := b.submit(t, "bob", "https://example.com/d/stuck")
	br.run(t, "admin sign-in",
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
			return err
		}),
		chromedp.SendKeys(chromedp.CSS("#key"), "root-key"),
		chromedp.Click(chromedp.CSS("#signin")),
	)
	br.wait(t, "the admin's overview", fmt.Sprintf(`!!document.querySelector('.charts') && document.querySelectorAll('.chart polyline').length === 3 && document.querySelector('#live').textContent.includes(%q)`, d[:8]))
	br.screenshot(t, "admin-dark")
	br.open(t, "bob's job page", fmt.Sprintf(`a[href="/ui/jobs/%s"]`, d), `!!document.querySelector('#cancel')`)
	br.click(t, "admin cancel", "#cancel")
	br.wait(t, "bob's job cancelled", `!!document.querySelector('#job-status') && document.querySelector('#job-status').textContent === 'cancelled'`)
	br.click(t, "sign out", "#signout")
	br.wait(t, "the sign-in form", `!!document.querySelector('#key')`)

	if errs := br.consoleErrors(); len(errs) > 0 {
		t.Fatalf("the pages logged errors:\n%s", strings.Join(errs, "\n"))
	}
	t.Logf("screenshots in %s", br.shot)
}

// layoutProblems is a JavaScript expression that lists what is wrong with
// the page's layout, as strings: two boxes of the header, or two items of
// a summary, or an item's label and value, that overlap; a label or value
// outside its item or wider than it; a time in a summary that wraps; a
// page wider than the window. Boxes are compared by their bounding
// rectangles (a pixel of slack for rounding).
const layoutProblems = `(() => {
  const out = [];
  const r = el => el.getBoundingClientRect();
  const name = el => el.id ? '#' + el.id : el.tagName.toLowerCase() + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '') + ' "' + el.textContent.trim().slice(0, 24) + '"';
  const overlap = (a, b) => { const p = r(a), q = r(b); return Math.min(p.right, q.right) - Math.max(p.left, q.left) > 1 && Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top) > 1; };
  const inside = (a, b) => { const p = r(a), q = r(b); return p.left >= q.left - 1 && p.right <= q.right + 1 && p.top >= q.top - 1 && p.bottom <= q.bottom + 1; };
  const pairs = (els, what) => { for (let i = 0; i < els.length; i++) for (let j = i + 1; j < els.length; j++) if (overlap(els[i], els[j])) out.push(what + ': ' + name(els[i]) + ' overlaps ' + name(els[j])); };
  const header = [...document.querySelectorAll('.top .brand, .top .links a, .top .who, .top #signout')];
  pairs(header, 'header');
  pairs([...document.querySelectorAll('form.filters > *')], 'filters');
  pairs([...document.querySelectorAll('.jobline > *')].filter(el => el.closest('li') && el.getClientRects().length), 'job row');
  for (const el of header) if (r(el).right > window.innerWidth + 1 || r(el).left < -1) out.push('header: ' + name(el) + ' outside the window');
  for (const dl of document.querySelectorAll('dl.summary')) {
    const items = [...dl.children];
    pairs(items, 'summary');
    for (const it of items) {
      const dt = it.querySelector('dt'), dd = it.querySelector('dd');
      if (!dt || !dd) continue;
      if (overlap(dt, dd)) out.push('summary item ' + name(dt) + ': label overlaps value');
      for (const el of [dt, dd]) {
        if (!inside(el, it)) out.push('summary ' + name(el) + ' outside its item');
        if (el.scrollWidth > el.clientWidth + 1) out.push('summary ' + name(el) + ' wider than its item');
      }
      for (const t of dd.querySelectorAll('time')) if (t.getClientRects().length > 1 || r(t).height > 1.6 * parseFloat(getComputedStyle(t).lineHeight || '20')) out.push('summary ' + name(t) + ' wraps');
    }
  }
  if (document.documentElement.scrollWidth > window.innerWidth) out.push('the page is wider than the window: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
  return out;
})()`

// setScheme makes the page prefer a dark or light colour scheme.
func setScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	})
}

// TestDashboard_BrowserHeaderLayout: the header, the job page's summary,
// the jobs page's filters and the job rows at 1280, 1440 and 390 px, light
// and dark, for a caller and an admin: no two boxes overlap (their
// bounding rectangles compared), no label runs into its value, no time
// wraps, nothing is wider than the window.
func TestDashboard_BrowserHeaderLayout(t *testing.T) {
	testkit.RequireTier(t, "browser")
	b := setup(t)
	br := startBrowser(t)
	id := b.submit(t, "alice", "https://example.com/a/ok", "https://example.com/a/fail")
	b.waitTerminal(t, id)
	for _, who := range []string{"alice", "root"} {
		br.run(t, "sign in", chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#key")), chromedp.SendKeys(chromedp.CSS("#key"), who+"-key"+kb.Enter))
		br.wait(t, "the overview", `!!document.querySelector('#live') && !!document.querySelector('#signout')`)
		for _, scheme := range []string{"light", "dark"} {
			for _, width := range []int64{1280, 1440, 390} {
				for _, page := range []string{"/ui/jobs/" + id, "/ui/", "/ui/jobs"} {
					br.run(t, "viewport", chromedp.EmulateViewport(width, 900), setScheme(scheme), chromedp.Navigate(b.url+page))
					br.wait(t, "the page "+page, `document.readyState === 'complete' && !!document.querySelector('.top #signout') && !!document.querySelector('main .card')`)
					if problems := eval[[]string](t, br, layoutProblems); len(problems) > 0 {
						t.Errorf("%s at %d px, %s, as %s:\n%s", page, width, scheme, who, strings.Join(problems, "\n"))
					}
					if page == "/ui/jobs/"+id {
						br.screenshot(t, fmt.Sprintf("job-%s-%d-%s", who, width, scheme))
					}
				}
			}
		}
		br.run(t, "desktop", chromedp.EmulateViewport(1280, 800))
		br.click(t, "sign out", "#signout")
		br.wait(t, "the sign-in form", `!!document.querySelector('#key')`)
	}
	// Not vacuous: the summary was there to check, with a time in it.
	if errs := br.consoleErrors(); len(errs) > 0 {
		t.Fatalf("the pages logged errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestDashboard_BrowserJobsPage: in Chromium, a caller pages through her
// jobs, filters them by status, searches by id prefix and by URL, and
// opens one by its short id from the overview's "Open a job"; none of
// bob's jobs shows.
func TestDashboard_BrowserJobsPage(t *testing.T) {
	testkit.RequireTier(t, "browser")
	b := setup(t)
	var mine []string
	for i := range 27 {
		u := fmt.Sprintf("https://example.com/alice/%d", i)
		if i == 13 {
			u += "/fail"
		}
		mine = append(mine, b.submitRun(t, "alice", u))
	}
	bobs := b.submitRun(t, "bob", "https://example.com/bob/1")
	br := startBrowser(t)
	br.run(t, "sign in", chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#key")), chromedp.SendKeys(chromedp.CSS("#key"), "alice-key"+kb.Enter))
	br.wait(t, "the overview", `!!document.querySelector('#nav-jobs')`)
	rows := `[...document.querySelectorAll('#jobs-list .job a.id')].map(a => a.getAttribute('href').slice(9))`
	br.open(t, "the jobs page", "#nav-jobs", `!!document.querySelector('#jobs-list')`)
	if got := eval[[]string](t, br, rows); len(got) != 25 || got[0] != mine[26] || got[24] != mine[2] {
		t.Fatalf("the first page lists %d jobs from %v, want the newest 25", len(got), got[:min(1, len(got))])
	}
	br.screenshot(t, "jobs-desktop")
	br.open(t, "the older page", "#page-next", `!!document.querySelector('#page-first')`)
	if got := eval[[]string](t, br, rows); len(got) != 2 || got[0] != mine[1] || got[1] != mine[0] {
		t.Fatalf("the second page lists %v, want the two oldest", got)
	}
	// Filter by status with the form.
	br.run(t, "filter failed", chromedp.SetValue(chromedp.CSS("#f-status"), "failed"))
	br.open(t, "the failed jobs", "#f-go", `location.search.includes('status=failed')`)
	if got := eval[[]string](t, br, rows); len(got) != 1 || got[0] != mine[13] {
		t.Fatalf("status failed lists %v, want %s", got, mine[13])
	}
	// Search by id prefix, then by URL.
	br.run(t, "search by id", chromedp.SetValue(chromedp.CSS("#f-status"), ""), chromedp.SetValue(chromedp.CSS("#f-q"), mine[7][:6]))
	br.open(t, "the id search", "#f-go", `location.search.includes('q=`+mine[7][:6]+`')`)
	if got := eval[[]string](t, br, rows); !slices.Contains(got, mine[7]) || slices.Contains(got, bobs) {
		t.Fatalf("the id search lists %v", got)
	}
	br.run(t, "search by URL", chromedp.SetValue(chromedp.CSS("#f-q"), "alice/20"))
	br.open(t, "the URL search", "#f-go", `location.search.includes('q=alice')`)
	if got := eval[[]string](t, br, rows); len(got) != 1 || got[0] != mine[20] {
		t.Fatalf("the URL search lists %v, want %s", got, mine[20])
	}
	if note := eval[string](t, br, `document.querySelector('#jobs-note').textContent`); !strings.Contains(note, "Searched the URLs") {
		t.Fatalf("the URL search's note: %q", note)
	}
	// Open a job by its short id, as the lists show it.
	short := eval[string](t, br, `document.querySelector('#jobs-list .job a.id code').textContent`)
	if short != engine.ShortID(mine[20]) {
		t.Fatalf("the list shows %q, want the short id %q", short, engine.ShortID(mine[20]))
	}
	br.run(t, "the overview", chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#job-id")), chromedp.SendKeys(chromedp.CSS("#job-id"), short+kb.Enter))
	br.wait(t, "the job page", fmt.Sprintf(`location.pathname === '/ui/jobs/%s' && !!document.querySelector('#job-status')`, mine[20]))
	if errs := br.consoleErrors(); len(errs) > 0 {
		t.Fatalf("the pages logged errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestDashboard_BrowserAdminFinishedAndTimings: in Chromium, a job of
// bob's that started and ended while no page was open is on the admin's
// overview under Recently finished; its page shows when it started and
// ended, how long it and each target took, and the options; the admin
// resubmits its failed target as a new job of bob's.
func TestDashboard_BrowserAdminFinishedAndTimings(t *testing.T) {
	testkit.RequireTier(t, "browser")
	b := setup(t)
	id, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("bob"), "", []engine.Target{
		{URL: "https://example.com/bob/slow", Options: engine.Options{Grep: "price"}},
		{URL: "https://example.com/bob/fail"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.waitTerminal(t, id)
	br := startBrowser(t)
	br.run(t, "sign in", chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#key")), chromedp.SendKeys(chromedp.CSS("#key"), "root-key"+kb.Enter))
	br.wait(t, "bob's job under Recently finished", fmt.Sprintf(`[...document.querySelectorAll('#recent-h ~ ol .job a.id')].some(a => a.getAttribute('href') === '/ui/jobs/%s')`, id))
	br.open(t, "bob's job", fmt.Sprintf(`#recent-h ~ ol a[href="/ui/jobs/%s"]`, id), `!!document.querySelector('#job-took')`)
	text := func(sel string) string {
		return eval[string](t, br, fmt.Sprintf(`(document.querySelector(%q) || {textContent: ''}).textContent.trim()`, sel))
	}
	for sel, want := range map[string]string{
		"#job-started": "Jan 2 03:04:05 UTC", "#job-ended": "Jan 2 03:04:06 UTC", "#job-took": "1.5 s",
		"tbody tr:first-child .took": "1.5 s", "tbody tr:first-child .opt": "grep: price", "tbody tr:nth-child(2) .hint": "check the URL",
	} {
		if got := text(sel); got != want {
			t.Errorf("%s reads %q, want %q", sel, got, want)
		}
	}
	br.screenshot(t, "job-timings")
	br.open(t, "resubmit", "#resubmit", `!!document.querySelector('#resubmitted')`)
	newID := strings.TrimPrefix(eval[string](t, br, `location.pathname`), "/ui/jobs/")
	if j, ok := b.Runner.Job(newID); !ok || j.Caller != "bob" || j.TargetsTotal != 1 {
		t.Fatalf("the resubmitted job %s: %+v", newID, j)
	}
	if errs := br.consoleErrors(); len(errs) > 0 {
		t.Fatalf("the pages logged errors:\n%s", strings.Join(errs, "\n"))
	}
}
