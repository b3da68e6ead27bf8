// Package browsertest drives the web UI in a real, headless Chromium (the
// one testbin.Chromium finds: Debian's in CI) from Go tests, through
// chromedp: a Page is a tab with the few actions the UI's tests need —
// run chromedp actions, poll a JavaScript condition, evaluate, write a
// screenshot. Every failure says what the test waited for and ends with
// the tail of the page's text, which is what one needs to see why.
//
// Screenshots go to $HARVEST_TEST_ARTIFACTS/webui (CI keeps them), else
// to a temporary directory the test logs.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
)

// Page is a Chromium tab and the test's ways to drive it.
type Page struct {
	T *testing.T
	// Ctx is the tab's chromedp context, for actions Page has no method for.
	Ctx   context.Context
	shots string
	n     *int // screenshots taken, by every Page of the browser
}

// New starts a headless Chromium with a profile of its own (removed when
// the test ends) and returns its first tab.
func New(t *testing.T) *Page {
	t.Helper()
	chromium := testbin.Chromium(t)
	profile, err := os.MkdirTemp("", "harvest-chromium-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(profile) })
	actx, cancelAlloc := chromedp.NewExecAllocator(testbin.Context(t),
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	shots := os.Getenv("HARVEST_TEST_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	}
	shots = filepath.Join(shots, "webui")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)
	return &Page{T: t, Ctx: bctx, shots: shots, n: new(int)}
}

// Person opens a tab in a new browser context of p's Chromium: another
// person's window, with cookies and storage of its own (as an incognito
// window), without another Chromium. It is disposed of when the test
// ends.
func (p *Page) Person() *Page {
	p.T.Helper()
	// The browser is started before a context is added to it.
	if err := chromedp.Do(p.Ctx); err != nil {
		p.T.Fatalf("starting Chromium: %v", err)
	}
	ctx, cancel := chromedp.NewContext(p.Ctx, chromedp.WithNewBrowserContext())
	p.T.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		p.T.Fatalf("opening a new browser context: %v", err)
	}
	return &Page{T: p.T, Ctx: ctx, shots: p.shots, n: p.n}
}

// Run runs actions, failing the test with the page's text if one fails.
func (p *Page) Run(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.T.Helper()
	if err := chromedp.Do(p.Ctx, actions...); err != nil {
		p.T.Fatalf("%s: %v\nthe page says:\n%s", what, err, p.text())
	}
}

// Wait polls a JavaScript condition until it holds.
func (p *Page) Wait(what, cond string) {
	p.T.Helper()
	p.WaitWithin(what, cond, stacktest.WaitTimeout)
}

// WaitWithin is Wait with its own limit, for what takes long on a loaded
// machine by its nature (a demo turn that builds and tests Go in a box).
func (p *Page) WaitWithin(what, cond string, d time.Duration) {
	p.T.Helper()
	deadline := time.Now().Add(d)
	for {
		_, err := chromedp.Run(p.Ctx, chromedp.Poll[bool](cond,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		// The page navigated while polling (a sign-in's redirects back to
		// the UI): poll the new page.
		if (strings.Contains(err.Error(), "navigated or closed") || strings.Contains(err.Error(), "Cannot find context with specified id")) && time.Now().Before(deadline) {
			continue
		}
		p.T.Fatalf("waiting for %s: %v\nthe page says:\n%s", what, err, p.text())
	}
}

func (p *Page) text() string {
	text, _ := chromedp.Run(p.Ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(-3000) : ""`))
	return text
}

// Eval evaluates js in the page (awaiting a promise).
func Eval[T any](p *Page, js string) T {
	p.T.Helper()
	v, err := chromedp.Run(p.Ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.T.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// Shot writes a screenshot named after the step (numbered in order).
func (p *Page) Shot(name string) {
	p.T.Helper()
	b, err := chromedp.Run(p.Ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.T.Fatalf("screenshot %s: %v", name, err)
	}
	*p.n++
	if err := os.WriteFile(filepath.Join(p.shots, fmt.Sprintf("%02d-%s.png", *p.n, name)), b, 0o644); err != nil {
		p.T.Fatal(err)
	}
}

// HasText is a condition: an element matching sel contains text.
func HasText(sel, text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(%q)].some(e => e.textContent.includes(%q))`, sel, text)
}

// SeqsInOrder is a condition that fails when the timeline repeats or
// reorders an event: its items' seqs strictly increase.
const SeqsInOrder = `(() => { const s = [...document.querySelectorAll(".timeline [data-seq]")].map(e => +e.dataset.seq);
  return s.every((v, i) => i === 0 || v > s[i-1]); })()`
