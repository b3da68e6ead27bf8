package server_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/browsertest"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestWebUIEventsCompacted: the session page in Chromium, open on a
// running turn, loses its server; meanwhile the turn ends, the session
// stops and retention removes its bulky events. When the server is back
// the page resumes inside the removed run: it says how many of the
// events it had not seen were removed by the retention policy, shows the
// turn's result as the answer, and carries on (no gap error, nothing
// twice). Reloaded, it shows the compacted history.
func TestWebUIEventsCompacted(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	u := newUIServer(e)
	base := "http://" + u.addr
	p := browsertest.New(t)
	p.Run("opening the page", chromedp.Navigate(base+"/"))
	p.Run("signing in", chromedp.WaitVisible(`form.signin #token`), chromedp.SendKeys(`form.signin #token`, e.Alice), chromedp.Click(`form.signin button[type=submit]`))
	p.Wait("the session list", `document.querySelector("table.sessions") !== null`)

	v := e.create(e.AliceC, "long task")
	p.Run("opening the session", chromedp.Navigate(base+"/#/s/"+v.ID))
	p.Wait("its running tool", `document.querySelector(".item.tool.running") !== null && document.querySelector(".conn.live") !== null`)
	toolSeq := browsertest.Eval[int64](p, `+document.querySelector(".item.tool.running").dataset.seq`)
	u.stop()
	p.Wait("the page to notice", `document.querySelector(".conn.live") === null`)

	full, err := e.AdminC.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	release(t, full)
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "the turn's end", stacktest.TurnEnded("t1"))
	if err := e.AliceC.Stop(ctx, v.ID, wire.StopRequest{Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	stacktest.ReadUntil(t, st, "the session stopped", stacktest.IsState(store.StateStopped))
	compact(t, e, v.ID)
	log, err := e.AliceC.EventLog(ctx, v.ID, toolSeq, 1)
	if err != nil || len(log.Events) != 1 {
		t.Fatalf("the log after the tool's start: %v, %v", log, err)
	}
	mark, ok := log.Events[0].Data.(event.EventsCompacted)
	if !ok || mark.From > toolSeq {
		t.Fatalf("the tool's start (seq %d) is not in a removed run: %s %+v", toolSeq, log.Events[0].Type(), log.Events[0].Data)
	}

	u.start()
	missed := mark.Missed(toolSeq)
	p.Wait("the removed events called out, the result shown, the turn ended",
		browsertest.HasText(".item.removed", fmt.Sprintf("%d earlier events were removed by the retention policy", missed))+
			` && `+browsertest.HasText(".item.assistant", "long task done")+
			` && document.querySelector(".item.turn.finished") !== null && document.querySelector(".conn.live") !== null`)
	p.Wait("no event twice or out of order", browsertest.SeqsInOrder)
	p.Shot("retention-resumed")
	if n := browsertest.Eval[int](p, `document.querySelectorAll(".item.tool").length`); n != 1 {
		t.Errorf("%d tool items: the one the page saw before the removal should stay", n)
	}
	if status := browsertest.Eval[string](p, `document.querySelector(".item.tool .status").textContent`); status != "its end was removed by the retention policy" {
		t.Errorf("the tool whose end was removed says %q", status)
	}

	p.Run("reloading", chromedp.Reload())
	p.Wait("the compacted history", browsertest.HasText(".item.removed", fmt.Sprintf("%d earlier events were removed by the retention policy", mark.To-mark.From+1))+
		` && `+browsertest.HasText(".item.assistant", "long task done")+
		` && `+browsertest.HasText(".item.user", "long task")+
		` && document.querySelector(".item.turn.finished") !== null`)
	p.Wait("no event twice or out of order", browsertest.SeqsInOrder)
	if n := browsertest.Eval[int](p, `document.querySelectorAll(".item.tool").length`); n != 0 {
		t.Errorf("%d tool items after the reload: the tool's events were removed", n)
	}
	p.Shot("retention-reloaded")
}
