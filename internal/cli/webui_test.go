package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/browsertest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// longScript: "long task" runs a bash command that waits for the file
// "go" in the workspace, then answers "long task done"; "msg ..." is
// answered "ok".
const longScript = `
rules:
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: released
    when: {tool_result: "released"}
    reply: {text: "long task done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.01; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestWebUIAcrossServeRestart: the web UI in a real Chromium follows a
// session of the real `harvest serve` while the process is killed (kill
// -9, mid-turn) and started again on the same address: the page notices,
// reconnects from the last event it has, shows the interrupted turn and
// what follows (a follow-up sent from the page after the restart), and
// its timeline has every event once, in order — the same as a fresh load
// of the page.
func TestWebUIAcrossServeRestart(t *testing.T) {
	e := newServeEnvWith(t, longScript)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := e.start("--listen", addr)
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "long task"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(e.home, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}

	base := "http://" + addr
	p := browsertest.New(t)
	p.Run("opening the page", chromedp.Navigate(base+"/"))
	p.Run("signing in", chromedp.WaitVisible(`form.signin #token`), chromedp.SendKeys(`form.signin #token`, strings.TrimSpace(string(tok))),
		chromedp.Click(`form.signin button[type=submit]`))
	p.Wait("the session list", `document.querySelector("table.sessions") !== null`)
	p.Run("opening the session", chromedp.Navigate(base+"/#/s/"+v.ID))
	p.Wait("its running tool", `document.querySelector(".item.tool.running") !== null && document.querySelector(".conn.live") !== null`)
	p.Shot("serve-before-kill")

	s.cmd.Process.Signal(syscall.SIGKILL)
	s.wait()
	p.Wait("the page to notice", `document.querySelector(".conn.live") === null`)
	s = e.start("--listen", addr)
	c = e.client(s)
	p.Wait("the interrupted turn, after the restart", `document.querySelector(".item.turn.failed") !== null && document.querySelector(".conn.live") !== null`)
	p.Run("sending a follow-up", chromedp.SendKeys(`.composer textarea`, "msg after the restart"), chromedp.Click(`.composer button.send`))
	p.Wait("the follow-up answered", browsertest.HasText(".item.user.delivered", "msg after the restart")+` && `+browsertest.HasText(".item.assistant", "ok"))
	p.Wait("no event twice or out of order", browsertest.SeqsInOrder)
	p.Shot("serve-after-restart")

	// Every event the store has is on the page, once.
	follow(t, c, v.ID, 0, "the follow-up's turn end", func(ev event.Event) bool {
		_, ok := ev.Data.(event.TurnFinished)
		return ok
	})
	p.Wait("the follow-up's turn end on the page", `document.querySelectorAll(".item.turn.finished").length === 1`)
	live := browsertest.Eval[int](p, `document.querySelectorAll(".timeline [data-seq]").length`)
	p.Run("reloading", chromedp.Reload())
	p.Wait("the reloaded timeline", `document.querySelectorAll(".item.turn.finished").length === 1 && document.querySelector(".item.turn.failed") !== null`)
	if fresh := browsertest.Eval[int](p, `document.querySelectorAll(".timeline [data-seq]").length`); live != fresh {
		t.Errorf("the live timeline has %d items, a fresh load %d: a gap or a duplicate across the restart", live, fresh)
	}
}
