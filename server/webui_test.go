package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/browsertest"

	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/web"
	"github.com/harvest-dev/harvest/wire"
)

// The web UI (package web) in a headless Chromium against the real server
// and sessions: sign in, start a session from the page, watch it stream,
// send while it works, cancel, and a restart of the HTTP server mid-turn
// that the page rides out with no gap or duplicate. Screenshots of the
// steps go to $HARVEST_TEST_ARTIFACTS/webui (else a temporary directory;
// the test logs where).

// uiServer serves the API with the UI on its own address, over e's
// Manager and store, and can be restarted on that address.
type uiServer struct {
	e    *apiEnv
	addr string
	hs   *http.Server
	api  *server.Server
	done chan struct{}
}

func (u *uiServer) start() {
	u.e.T.Helper()
	var err error
	u.api, err = server.New(server.Config{Manager: u.e.Manager, Store: u.e.Store, UI: web.Handler(), KeepAlive: time.Second})
	if err != nil {
		u.e.T.Fatal(err)
	}
	addr := u.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		u.e.T.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.hs = &http.Server{Handler: u.api, ReadHeaderTimeout: 10 * time.Second}
	u.done = make(chan struct{})
	go func(hs *http.Server, done chan struct{}) {
		defer close(done)
		hs.Serve(ln)
	}(u.hs, u.done)
}

// stop drains and shuts the HTTP server down, as harvest serve does.
func (u *uiServer) stop() {
	if u.hs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u.api.Drain()
	if err := u.hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		u.e.T.Errorf("shutting the UI server down: %v", err)
	}
	<-u.done
	u.hs = nil
}

func newUIServer(e *apiEnv) *uiServer {
	u := &uiServer{e: e}
	u.start()
	e.T.Cleanup(u.stop)
	return u
}

func TestWebUIInChromium(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	u := newUIServer(e)
	base := "http://" + u.addr
	bobs := e.create(e.BobC, "")
	p := browsertest.New(t)

	// Sign in.
	p.Run("opening the page", chromedp.Navigate(base+"/"))
	p.Run("the sign-in form", chromedp.WaitVisible(`form.signin #token`))
	p.Shot("sign-in")
	p.Run("signing in", chromedp.SendKeys(`form.signin #token`, e.Alice), chromedp.Click(`form.signin button[type=submit]`))
	p.Wait("the session list", `document.querySelector("table.sessions") !== null && document.querySelector("nav .who")?.textContent === "alice"`)
	// The page's scripts see neither the token nor the cookie (HttpOnly).
	if stored := browsertest.Eval[string](p, `JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie`); strings.Contains(stored, e.Alice) || strings.Contains(stored, server.SessionCookie) {
		t.Errorf("the token or the cookie is visible to the page's scripts: %s", stored)
	}

	// A new session from the page; it streams its long turn.
	p.Run("opening New session", chromedp.Click(`a[href="#/new"]`), chromedp.WaitVisible(`form.new`))
	p.Wait("the repositories the server allows, offered", fmt.Sprintf(`document.querySelector('#sources option[value=%q]') !== null`, e.Repo))
	p.Run("filling the form", chromedp.SendKeys(`form.new input[name=source]`, e.Repo), chromedp.SendKeys(`form.new textarea[name=prompt]`, "long task"))
	p.Shot("new-session")
	p.Run("starting it", chromedp.Click(`form.new button[type=submit]`))
	p.Wait("the running tool", `document.querySelector(".item.tool.running") !== null`)
	hash := browsertest.Eval[string](p, `location.hash`)
	id := strings.TrimPrefix(hash, "#/s/")
	if _, err := e.AliceC.GetSession(ctx, id); err != nil {
		t.Fatalf("the page's session %q: %v", hash, err)
	}
	v, err := e.AdminC.GetSession(ctx, id) // with the workspace's path
	if err != nil {
		t.Fatal(err)
	}

	// A follow-up while it works: queued, then delivered.
	p.Run("sending a follow-up", chromedp.SendKeys(`.composer textarea`, "msg follow-up"), chromedp.Click(`.composer button.send`))
	p.Wait("the queued message", browsertest.HasText(".item.user.queued", "msg follow-up"))
	p.Shot("queued")
	release(t, v)
	p.Wait("the follow-up delivered and answered", browsertest.HasText(".item.user.delivered", "msg follow-up")+` && `+browsertest.HasText(".item.assistant", "long task done")+
		` && document.querySelectorAll(".item.turn.finished").length === 2`)
	p.Shot("delivered")

	// Cancel a long command (in a session of its own: the script answers a
	// second long task of a session at once).
	v2 := e.create(e.AliceC, "long task")
	p.Run("opening the second session", chromedp.Navigate(base+"/#/s/"+v2.ID))
	p.Wait("its running tool", `document.querySelector(".item.tool.running") !== null`)
	p.Run("cancelling", chromedp.Click(`.composer button.cancel`))
	p.Wait("the cancelled turn", `document.querySelector(".item.turn.cancelled") !== null && document.querySelector(".item.tool.running") === null`)
	p.Shot("cancelled")

	// Restart the server mid-turn: the page goes on with nothing lost or
	// repeated.
	v3 := e.create(e.AliceC, "long task")
	p.Run("opening the third session", chromedp.Navigate(base+"/#/s/"+v3.ID))
	p.Wait("its running tool", `document.querySelector(".item.tool.running") !== null && document.querySelector(".conn.live") !== null`)
	u.stop()
	p.Wait("the page to notice", `document.querySelector(".conn.live") === null`)
	u.start()
	v3, err = e.AdminC.GetSession(ctx, v3.ID)
	if err != nil {
		t.Fatal(err)
	}
	release(t, v3)
	p.Wait("the turn's end after the restart", `document.querySelectorAll(".item.turn.finished").length === 1 && document.querySelector(".conn.live") !== null`)
	p.Wait("no event twice or out of order", browsertest.SeqsInOrder)
	p.Shot("after-restart")
	live := browsertest.Eval[int](p, `document.querySelectorAll(".timeline [data-seq]").length`)
	p.Run("reloading", chromedp.Reload())
	p.Wait("the reloaded timeline", `document.querySelectorAll(".item.turn.finished").length === 1`)
	if fresh := browsertest.Eval[int](p, `document.querySelectorAll(".timeline [data-seq]").length`); live != fresh {
		t.Errorf("the live timeline has %d items, the reloaded one %d: a gap or a duplicate across the restart", live, fresh)
	}

	// The list: Alice's session, never Bob's.
	p.Run("opening the list", chromedp.Navigate(base+"/#/"))
	p.Wait("the session in the list", fmt.Sprintf(`document.querySelector('tr[data-id=%q]') !== null`, id))
	listed := browsertest.Eval[string](p, `document.querySelector("table.sessions").innerText + [...document.querySelectorAll("tr[data-id]")].map(r => r.dataset.id).join(" ")`)
	if strings.Contains(listed, bobs.ID) {
		t.Errorf("Alice's list shows Bob's session %s: %s", bobs.ID, listed)
	}
	p.Shot("list")

	// At a phone's width the list and a session page fit: nothing wider
	// than the screen, so nothing scrolls sideways.
	p.Run("a phone's width", chromedp.EmulateViewport(390, 844))
	fits := `document.documentElement.scrollWidth <= window.innerWidth`
	p.Run("the list on a phone", chromedp.Navigate(base+"/#/"))
	p.Wait("the list fitting the screen", `document.querySelector("table.sessions") !== null && `+fits)
	p.Shot("phone-list")
	p.Run("a session on a phone", chromedp.Navigate(base+"/#/s/"+id))
	p.Wait("the session fitting the screen", `document.querySelector(".item.turn.finished") !== null && `+fits)
	p.Shot("phone-session")
	p.Run("a laptop's width again", chromedp.EmulateViewport(1280, 900))

	// Forged requests from another origin in the same browser are refused.
	// A JSON body cannot be sent cross-origin without a preflight, but a
	// cancel takes none: a bodiless POST from a form or a no-cors fetch is
	// what an attacker would send. 127.0.0.1 on another port is the same
	// site, so the SameSite cookie goes along: the Origin and CSRF checks
	// are what stop it.
	v4 := e.create(e.AliceC, "long task")
	waitRunning(t, e, v4.ID)
	cancelURL := base + "/v1/sessions/" + v4.ID + "/cancel"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id=f method=post action=%q></form><script>
window.done = fetch(%q, {method: "POST", credentials: "include", mode: "no-cors"}).then(() => "sent", e => String(e));
</script>`, cancelURL, cancelURL)
	}))
	t.Cleanup(evil.Close)
	p.Run("the forged page", chromedp.Navigate(evil.URL))
	if res := browsertest.Eval[string](p, `window.done`); res != "sent" {
		t.Fatalf("the forged fetch did not go out: %s", res)
	}
	resp, err := chromedp.RunResponse(p.Ctx, chromedp.Submit(`#f`))
	if err != nil {
		t.Fatalf("the forged form: %v", err)
	}
	if resp.Status != http.StatusForbidden {
		t.Errorf("the forged form's POST: %d, want 403", resp.Status)
	}
	p.Shot("forged-refused")
	log, err := e.AliceC.EventLog(ctx, v4.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range log.Events {
		if _, ok := ev.Data.(event.TurnCancelled); ok {
			t.Errorf("a forged cross-site POST cancelled the turn (event %d)", ev.Seq)
		}
	}
}

// waitRunning waits until session id's turn runs its tool.
func waitRunning(t *testing.T, e *apiEnv, id string) {
	t.Helper()
	ctx := testbin.Context(t)
	for after := int64(0); ; {
		log, err := e.AliceC.EventLog(ctx, id, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range log.Events {
			if _, ok := ev.Data.(event.ToolStarted); ok {
				return
			}
			after = ev.Seq
		}
		if len(log.Events) == 0 {
			// Nothing new yet: block on the stream until more comes.
			s := e.openRaw(e.Alice, id, nil, fmt.Sprintf("since=%d", after))
			s.next()
			s.close()
		}
	}
}

// release ends a "long task" turn.
func release(t *testing.T, v *wire.View) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(v.Repos[0].Path, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
