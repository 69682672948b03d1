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
	// The form's POST and its redirect navigate: a poll they cut short is
	// started again on the new page.
	for {
		err := chromedp.Do(ctx, poll(`!!document.querySelector('#signout') && document.querySelector('.badge').textContent === 'admin'`))
		if err == nil {
			break
		}
		if ctx.Err() != nil || !(strings.Contains(err.Error(), "navigated") || strings.Contains(err.Error(), "context with specified id")) {
			t.Fatalf("signed in as the admin: %v", err)
		}
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"jobs"),
		poll(`['alice', 'bob', 'carol'].every(n => [...document.querySelectorAll('#jobs-list .caller')].some(c => c.textContent === n))`),
	); err != nil {
		t.Fatalf("sign in with the printed key and list the demo's jobs: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("the demo returned %v", err)
	}
}
