package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/leasehold/leasehold/internal/testenv"
)

// chromium finds Debian's chromium, or calls testenv.Missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{testenv.Env("LEASEHOLD_CHROMIUM", ""), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "chromium (a real browser for the status page test)", "apt-get install -y chromium chromium-driver, or set LEASEHOLD_CHROMIUM")
	return ""
}

// browser starts a headless chromium with a fresh profile and returns a
// chromedp context bound to it.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 760),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, so that a browser that cannot start fails here.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// TestStatusPageInBrowser opens the status page in a real browser and checks
// what a person sees as a lease changes hands: the holder changes without a
// reload, the change is announced to screen readers, and the timeline
// (opened from the keyboard) shows the term that ended and how.
func TestStatusPageInBrowser(t *testing.T) {
	bctx := browser(t)
	s := startServe(t)
	rec, err := s.st.Acquire(context.Background(), "nightly-report", "alpha", time.Minute, "alpha.example:8080")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.Acquire(context.Background(), "cache-warmer", "gamma", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	const row = `tr[data-lease="nightly-report"]`
	fail := func(what string, err error) {
		t.Helper()
		html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("main").outerHTML`))
		t.Fatalf("%s: %v\npage:\n%s", what, err, html)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			fail(what, err)
		}
	}
	eval := func(what, js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			fail(what, err)
		}
		return v
	}
	text := func(sel string) string {
		t.Helper()
		return strings.TrimSpace(eval("reading "+sel, `(document.querySelector(`+jsString(sel)+`) || {textContent: "(missing)"}).textContent`))
	}
	waitText := func(sel, want string) {
		t.Helper()
		// Asked from Go every 50 ms, each time in a fresh evaluation, not
		// with chromedp.Poll: with Debian's Chromium 156 a Poll begun right
		// after the Enter that opens the timeline sometimes never answered
		// (on a page that already read want) and timed out.
		expr := `(() => { const e = document.querySelector(` + jsString(sel) + `); return e !== null && e.textContent.includes(` + jsString(want) + `); })()`
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
			if err != nil {
				t.Fatalf("waiting for %s to read %s: %v", sel, want, err)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s to read %s: not within 30s\npage:\n%s", sel, want, eval("reading the page", `document.querySelector("main").outerHTML`))
			}
			tick := time.NewTimer(50 * time.Millisecond)
			<-tick.C
		}
	}

	run("opening the page", chromedp.Navigate(s.url+"/"))
	waitText(row+" td.holder", "alpha")
	if got := text(row + " td.token"); got != "1" {
		t.Errorf("token cell %q, want 1", got)
	}
	if got := text(row + " td.meta"); got != "alpha.example:8080" {
		t.Errorf("metadata cell %q", got)
	}
	waitText(row+" td.left", " s")
	waitText("#connection-text", "Live")
	// A marker that a reload would wipe out.
	eval("marking the page", `String(window.__notReloaded = true)`)

	// Keyboard: Tab to the row's Timeline button and press Enter; the
	// timeline opens and its heading takes the focus.
	var focused string
	for i := 0; i < 20 && !strings.Contains(focused, "Timeline of nightly-report"); i++ {
		run("pressing Tab", chromedp.KeyEvent(kb.Tab))
		focused = eval("reading the focus", `document.activeElement ? document.activeElement.textContent : ""`)
	}
	if !strings.Contains(focused, "Timeline of nightly-report") {
		t.Fatalf("Tab never reached the timeline button of nightly-report (last focus %q)", focused)
	}
	// The page reads the store again every interval; the keyboard's place
	// survives it. Rows used to be moved at every read: Chromium still named
	// the button as the active element, but the Enter below then went
	// nowhere (a loaded CI run; with the old page this test fails there
	// every time, now that it waits for a read first).
	lastRead := text("#scope")
	for deadline := time.Now().Add(30 * time.Second); text("#scope") == lastRead; {
		if time.Now().After(deadline) {
			t.Fatalf("the page did not read the store again within 30s (%q)", lastRead)
		}
		tick := time.NewTimer(50 * time.Millisecond)
		<-tick.C
	}
	if f := eval("reading the focus", `document.activeElement ? document.activeElement.textContent : ""`); !strings.Contains(f, "Timeline of nightly-report") {
		t.Fatalf("after the page read the store again the focus is on %q, want the timeline button it was on", f)
	}
	run("pressing Enter", chromedp.KeyEvent(kb.Enter))
	waitText("#timeline-heading", "Timeline of nightly-report")
	waitText("#terms li[data-token='1'] .term-end", "Holding now")
	active := eval("reading the focus", `document.activeElement.id`)
	if active != "timeline-heading" {
		t.Errorf("focus after opening the timeline is on #%s, want #timeline-heading", active)
	}
	expanded := eval("reading aria-expanded", `document.querySelector(`+jsString(row+" button")+`).getAttribute("aria-expanded")`)
	if expanded != "true" {
		t.Errorf("the timeline button's aria-expanded is %q, want true", expanded)
	}

	// The lease changes hands in the store.
	beta := s.handOver(t, rec.Term, "beta")
	waitText(row+" td.holder", "beta")
	if got := text(row + " td.token"); got != "2" {
		t.Errorf("after the hand-over the token cell reads %q, want 2 (token %d)", got, beta.Token)
	}
	if eval("checking for a reload", `String(window.__notReloaded === true)`) != "true" {
		t.Errorf("the page reloaded to show the change")
	}
	// Screen readers hear the change from the live region.
	waitText("#announcer", "nightly-report: held by beta, token 2")
	live := eval("reading aria-live", `document.querySelector("#announcer").getAttribute("aria-live")`)
	if live != "polite" {
		t.Errorf("#announcer aria-live=%q", live)
	}
	// The open timeline follows: beta's term holding, alpha's ended by release.
	waitText("#terms li[data-token='2'] .term-end", "Holding now")
	waitText("#terms li[data-token='1'] .term-end", "released")
	if got := text("#terms li[data-token='1'] .term-head"); got != "Token 1: alpha" {
		t.Errorf("ended term reads %q", got)
	}
	if got := text("#terms li[data-token='1'] .term-when"); !strings.Contains(got, " to ") {
		t.Errorf("ended term has no end time: %q", got)
	}
	// Every control is reachable and labelled: each button has a name.
	unnamed := eval("checking labels", `[...document.querySelectorAll("button")].filter(b => b.offsetParent !== null && b.textContent.trim() === "").map(b => b.outerHTML).join(" ")`)
	if unnamed != "" {
		t.Errorf("buttons without a name: %v", unnamed)
	}

	// Escape closes the timeline and gives the focus back to its button.
	run("pressing Escape", chromedp.KeyEvent(kb.Escape))
	focused = eval("reading the focus", `document.activeElement.textContent`)
	if !strings.Contains(focused, "Timeline of nightly-report") {
		t.Errorf("after Escape the focus is on %q, want the timeline button", focused)
	}
	// Open it again for the picture.
	run("pressing Enter", chromedp.KeyEvent(kb.Enter))
	waitText("#terms li[data-token='1'] .term-end", "released")

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		fail("screenshot", err)
	}
	out := filepath.Join(t.TempDir(), "status-page.png")
	if p := os.Getenv("LEASEHOLD_SCREENSHOT"); p != "" {
		out = p // go test -run TestStatusPageInBrowser ./cmd/leasehold/ with LEASEHOLD_SCREENSHOT=$PWD/docs/status-page.png
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
