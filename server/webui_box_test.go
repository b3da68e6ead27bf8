package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/browsertest"
	"github.com/harvest-dev/harvest/internal/demo"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// signInPage opens the UI at base and signs in with token.
func signInPage(p *browsertest.Page, base, token string) {
	p.T.Helper()
	p.Run("opening the page", chromedp.Navigate(base+"/"))
	p.Run("signing in", chromedp.WaitVisible(`form.signin #token`), chromedp.SendKeys(`form.signin #token`, token), chromedp.Click(`form.signin button[type=submit]`))
	p.Wait("the session list", `document.querySelector("table.sessions") !== null`)
}

// typeInTerminal types text into the focused terminal, then Enter: the
// text as the browser inserts typed text (an input event: a key event per
// character would be read by xterm.js from both its keydown and its
// input), Enter as a key down and up (with no char event, which xterm.js
// would take for a second Enter).
func typeInTerminal(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := chromedp.Focus(`.xterm-helper-textarea`)(ctx, t); err != nil {
			return err
		}
		if _, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: text}); err != nil {
			return err
		}
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, input.DispatchKeyEventParams{
				Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestWebUIChangesAndShell: in Chromium, the Changes tab of a demo
// session on examples/calc shows its one-line fix, unified and split, and
// the Shell tab runs `echo hi` in the session's box.
func TestWebUIChangesAndShell(t *testing.T) {
	e := newAPIEnv(t)
	calc := demoRepo(t, e)
	u := newUIServer(e)
	base := "http://" + u.addr
	p := browsertest.New(t)
	signInPage(p, base, e.Alice)

	// The demo session, started from the page on examples/calc: the
	// timeline streams to the fixed test.
	p.Run("opening New session", chromedp.Click(`a[href="#/new"]`), chromedp.WaitVisible(`form.new`))
	p.Wait("examples/calc offered", fmt.Sprintf(`document.querySelector('#sources option[value=%q]') !== null`, calc))
	p.Run("filling the form", chromedp.SendKeys(`form.new input[name=source]`, calc), chromedp.SendKeys(`form.new input[name=model]`, demo.Model),
		chromedp.SendKeys(`form.new textarea[name=prompt]`, "Fix the failing test"))
	p.Run("starting it", chromedp.Click(`form.new button[type=submit]`))
	// The turn runs go test twice in a new box (a cold build cache): 90 s
	// was too short at load 80 in CI.
	p.WaitWithin("the failing test, then the fix and the passing test, then the end of the turn",
		browsertest.HasText(".item.tool", "FAIL")+` && `+browsertest.HasText(".item.tool", "ok")+` && document.querySelectorAll(".item.turn.finished").length === 1`, 5*time.Minute)
	p.Wait("no event twice or out of order", browsertest.SeqsInOrder)
	p.Shot("demo-fixed")
	p.Run("opening Changes", chromedp.Click(`.tabs .tab-changes`))
	file := `details.file[data-path="calc.go"]`
	p.Wait("the fix, unified", fmt.Sprintf(`(() => { const f = document.querySelector(%q); if (!f) return false;
	  const del = [...f.querySelectorAll("tr.del td.code")].map(e => e.textContent), add = [...f.querySelectorAll("tr.add td.code")].map(e => e.textContent);
	  return del.length === 1 && add.length === 1 && del[0] === "-\tfor i := 1; i < len(xs); i++ {" && add[0] === "+\tfor i := 0; i < len(xs); i++ {"
	    && f.querySelector("summary").textContent.includes("+1") && f.querySelector("summary").textContent.includes("−1"); })()`, file))
	p.Shot("changes-unified")
	p.Run("switching to split", chromedp.Click(`.changes button.mode.split`))
	p.Wait("the fix, side by side", fmt.Sprintf(`(() => { const f = document.querySelector(%q + " table.diff.split"); if (!f) return false;
	  const row = [...f.querySelectorAll("tr")].find(r => r.querySelector("td.code.del"));
	  return !!row && row.querySelector("td.code.del").textContent === "\tfor i := 1; i < len(xs); i++ {" && row.querySelector("td.code.add").textContent === "\tfor i := 0; i < len(xs); i++ {"; })()`, file))
	p.Shot("changes-split")

	p.Run("opening Shell", chromedp.Click(`.tabs .tab-shell`))
	p.Wait("the connected shell", `document.querySelector(".shell-status.live") !== null && document.querySelector(".xterm-rows")?.textContent.includes("$")`)
	p.Run("typing echo hi", typeInTerminal("echo hi"))
	p.Wait("hi on a line of its own", `[...document.querySelectorAll(".xterm-rows > div")].filter(r => r.textContent.trim() === "hi").length === 1`)
	if rows := browsertest.Eval[string](p, `document.querySelector(".xterm-rows").innerText`); strings.Count(rows, "echo hi") != 1 || strings.Contains(rows, "not found") {
		t.Errorf("the terminal shows the command other than once:\n%s", rows)
	}
	p.Shot("shell")
	p.Wait("shell.opened in the timeline", browsertest.HasText(".item.note", "opened a shell in the box"))
}
