package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// signInPage opens the UI at base and signs in with token.
func signInPage(p *page, base, token string) {
	p.t.Helper()
	p.run("opening the page", chromedp.Navigate(base+"/"))
	p.run("signing in", chromedp.WaitVisible(`form.signin #token`), chromedp.SendKeys(`form.signin #token`, token), chromedp.Click(`form.signin button[type=submit]`))
	p.wait("the session list", `document.querySelector("table.sessions") !== null`)
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
	v := demoSession(t, e, e.AliceC)
	u := newUIServer(e)
	base := "http://" + u.addr
	p := newPage(t)
	signInPage(p, base, e.Alice)

	p.run("opening the session", chromedp.Navigate(base+"/#/s/"+v.ID))
	p.wait("its finished turn", `document.querySelectorAll(".item.turn.finished").length === 1`)
	p.run("opening Changes", chromedp.Click(`.tabs .tab-changes`))
	file := `details.file[data-path="calc.go"]`
	p.wait("the fix, unified", fmt.Sprintf(`(() => { const f = document.querySelector(%q); if (!f) return false;
	  const del = [...f.querySelectorAll("tr.del td.code")].map(e => e.textContent), add = [...f.querySelectorAll("tr.add td.code")].map(e => e.textContent);
	  return del.length === 1 && add.length === 1 && del[0] === "-\tfor i := 1; i < len(xs); i++ {" && add[0] === "+\tfor i := 0; i < len(xs); i++ {"
	    && f.querySelector("summary").textContent.includes("+1") && f.querySelector("summary").textContent.includes("−1"); })()`, file))
	p.shot("changes-unified")
	p.run("switching to split", chromedp.Click(`.changes button.mode.split`))
	p.wait("the fix, side by side", fmt.Sprintf(`(() => { const f = document.querySelector(%q + " table.diff.split"); if (!f) return false;
	  const row = [...f.querySelectorAll("tr")].find(r => r.querySelector("td.code.del"));
	  return !!row && row.querySelector("td.code.del").textContent === "\tfor i := 1; i < len(xs); i++ {" && row.querySelector("td.code.add").textContent === "\tfor i := 0; i < len(xs); i++ {"; })()`, file))
	p.shot("changes-split")

	p.run("opening Shell", chromedp.Click(`.tabs .tab-shell`))
	p.wait("the connected shell", `document.querySelector(".shell-status.live") !== null && document.querySelector(".xterm-rows")?.textContent.includes("$")`)
	p.run("typing echo hi", typeInTerminal("echo hi"))
	p.wait("hi on a line of its own", `[...document.querySelectorAll(".xterm-rows > div")].filter(r => r.textContent.trim() === "hi").length === 1`)
	if rows := eval[string](p, `document.querySelector(".xterm-rows").innerText`); strings.Count(rows, "echo hi") != 1 || strings.Contains(rows, "not found") {
		t.Errorf("the terminal shows the command other than once:\n%s", rows)
	}
	p.shot("shell")
	p.wait("shell.opened in the timeline", hasText(".item.note", "opened a shell in the box"))
}
