package demo

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestRun_BrowserUI: headless Chromium signs in to the dashboard of demo
// --ui with the key the demo printed, and finds every caller's jobs on the
// jobs page. It is the browser tier's (SIFTBATCH_TIER=browser, make
// test/browser).
func TestRun_BrowserUI(t *testing.T) {
	testkit.RequireTier(t, "browser")
	var chromium string
	for _, p := range []string{os.Getenv("SIFTBATCH_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); p != "" && err == nil {
			chromium = path
			break
		}
	}
	if chromium == "" {
		t.Fatal("demo: the browser tier needs chromium: apt-get install chromium, or set SIFTBATCH_CHROMIUM")
	}
	// Chromium's own temporary files go apart from the demo's (which must
	// leave nothing behind): both directories are made before the demo
	// sets TMPDIR.
	profile, chromeTmp := t.TempDir(), t.TempDir()
	base, key, _, _, stop := startUIDemo(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.UserDataDir(profile), chromedp.Env("TMPDIR="+chromeTmp), chromedp.WindowSize(1280, 800))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, testkit.Deadline)
	defer cancel()
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond))
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), key+kb.Enter),
	); err != nil {
		t.Fatalf("sign in with the printed key: %v", err)
	}
	// A navigation (the form's POST and its redirect, a page loading)
	// cuts a poll short: it is started again on the new page.
	waitFor := func(what, expr string) {
		t.Helper()
		for {
			err := chromedp.Do(ctx, poll(expr))
			if err == nil {
				return
			}
			if ctx.Err() != nil || !(strings.Contains(err.Error(), "navigated") || strings.Contains(err.Error(), "context with specified id")) {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	waitFor("signed in as the admin", `document.readyState === 'complete' && !!document.querySelector('#signout') && document.querySelector('.badge').textContent === 'admin'`)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"jobs")); err != nil {
		t.Fatalf("open the jobs page: %v", err)
	}
	waitFor("every caller's jobs on the jobs page", `location.pathname === '/ui/jobs' && ['alice', 'bob', 'carol'].every(n => [...document.querySelectorAll('#jobs-list .caller')].some(c => c.textContent === n))`)
	if err := stop(); err != nil {
		t.Fatalf("the demo returned %v", err)
	}
}
