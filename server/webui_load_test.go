package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/browsertest"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestWebUITenThousandEvents measures a session page holding 10,000 events
// in Chromium: the time from navigating to it until the whole timeline is
// on the page and the page answers (a click on the Changes tab is
// handled), and the tab's memory as Chromium reports it
// (Performance.getMetrics: JSHeapUsedSize, Nodes). It logs the numbers
// (BENCHMARKS.md has them, and the command).
func TestWebUITenThousandEvents(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "")
	waitIdleSession(t, e, v.ID)
	first, err := e.Store.LastSeq(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	// 2,000 turns of five events: started, a paragraph, a tool call and
	// its result, finished.
	const turns = 2000
	now := time.Now().UTC()
	for i := range turns {
		tid := fmt.Sprintf("t%d", i+1)
		call := fmt.Sprintf("c%d", i+1)
		for _, p := range []event.Payload{
			event.TurnStarted{Prompt: "step " + tid},
			event.AssistantMessage{Text: fmt.Sprintf("Turn **%d**: reading `calc.go` and running the tests again, as the last result said.", i+1)},
			event.ToolStarted{CallID: call, Tool: "bash", Input: json.RawMessage(`{"command":"go test ./..."}`), Summary: "bash: go test ./..."},
			event.ToolFinished{CallID: call, Tool: "bash", Output: "ok  \texample.com/calc\t0.003s\n", DurationMS: 420},
			event.TurnFinished{Result: "done", StopReason: "end_turn", Steps: 1, CostUSD: 0.001},
		} {
			if _, err := e.Journal.Append(event.Event{Session: v.ID, Time: now, Turn: tid, Agent: "builtin", Data: p}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := e.Journal.AppendSync(ctx, event.Event{Session: v.ID, Time: now, Data: event.SessionState{State: "idle"}}); err != nil {
		t.Fatal(err)
	}
	last, _ := e.Store.LastSeq(ctx, v.ID)
	t.Logf("the session holds %d events (%d added)", last, last-first)

	u := newUIServer(e)
	base := "http://" + u.addr
	p := browsertest.New(t)
	signInPage(p, base, e.Alice)
	p.Run("enabling the metrics", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, performance.Enable, performance.EnableParams{})
		return err
	}))
	start := time.Now()
	p.Run("opening the session", chromedp.Navigate(base+"/#/s/"+v.ID))
	p.Wait("the whole timeline", fmt.Sprintf(`document.querySelectorAll(".item.turn.finished").length === %d`, turns))
	loaded := time.Since(start)
	p.Run("clicking Changes", chromedp.Click(`.tabs .tab-changes`))
	p.Wait("the Changes tab", `document.querySelector(".changes").hidden === false`)
	interactive := time.Since(start)
	p.Run("collecting garbage", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, heapprofiler.CollectGarbage, cdp.Empty{})
		return err
	}))
	m, err := chromedp.Call(p.Ctx, performance.GetMetrics, cdp.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]float64{}
	for _, x := range m.Metrics {
		metrics[x.Name] = x.Value
	}
	items := browsertest.Eval[int](p, `document.querySelectorAll(".timeline [data-seq]").length`)
	t.Logf("10,000 events: timeline complete in %v (%d items), interactive (a tab click handled) at %v; JSHeapUsedSize %.1f MiB, JSHeapTotalSize %.1f MiB, DOM nodes %.0f, LayoutDuration %.2fs, ScriptDuration %.2fs, TaskDuration %.2fs",
		loaded.Round(time.Millisecond), items, interactive.Round(time.Millisecond), metrics["JSHeapUsedSize"]/(1<<20), metrics["JSHeapTotalSize"]/(1<<20), metrics["Nodes"],
		metrics["LayoutDuration"], metrics["ScriptDuration"], metrics["TaskDuration"])
}

// waitIdleSession waits until session id is idle.
func waitIdleSession(t *testing.T, e *apiEnv, id string) {
	t.Helper()
	st := e.AliceC.Events(testbin.Context(t), id, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))
}
