package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
)

// dialShell opens the shell socket of session id with hdr.
func dialShell(t *testing.T, e *apiEnv, id string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	return websocket.Dial(testbin.Context(t), "ws"+strings.TrimPrefix(e.URL, "http")+"/v1/sessions/"+id+"/shell",
		&websocket.DialOptions{HTTPHeader: hdr, HTTPClient: &http.Client{Transport: e.Transport}})
}

// readUntil reads the terminal until its output contains want.
func readUntil(t *testing.T, c *websocket.Conn, want string) string {
	t.Helper()
	var got bytes.Buffer
	for !strings.Contains(got.String(), want) {
		_, b, err := c.Read(testbin.Context(t))
		if err != nil {
			t.Fatalf("reading the terminal for %q: %v; it showed %q", want, err, got.String())
		}
		got.Write(b)
	}
	return got.String()
}

// TestShell: a shell in the session's box over a WebSocket, typed into
// and resized, that exits with a normal close; shell.opened and
// shell.closed record who and how, not what was typed; the cookie needs
// this server's Origin; another token's session is a 404.
func TestShell(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "msg hi")
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))

	c, _, err := dialShell(t, e, v.ID, http.Header{"Authorization": {"Bearer " + e.Alice}})
	if err != nil {
		t.Fatal(err)
	}
	resize, _ := json.Marshal(server.ShellControl{Type: "resize", Rows: 30, Cols: 123})
	if err := c.Write(ctx, websocket.MessageText, resize); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("stty size; pwd; echo secret-$((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, c, "secret-42\r\n")
	if !strings.Contains(out, "30 123\r\n/workspace/repo\r\n") {
		t.Errorf("the terminal showed %q: want secret-42, the size 30 123 and the workspace", out)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("exit 3\n")); err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, err = c.Read(ctx); err != nil {
			break
		}
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "exited (code 3)" {
		t.Errorf("the socket ended with %v, want a normal close saying exited (code 3)", err)
	}
	log, err := e.AliceC.EventLog(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var opened, closed int
	for _, ev := range log.Events {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), "secret") {
			t.Errorf("an event records what was typed: %s", b)
		}
		switch p := ev.Data.(type) {
		case event.ShellOpened:
			opened++
			if p.By != e.AliceID || p.ByName != "alice" || p.Repo != "repo" {
				t.Errorf("shell.opened: %+v", p)
			}
		case event.ShellClosed:
			closed++
			if p.By != e.AliceID || p.Code != 3 || p.Reason != "exited" {
				t.Errorf("shell.closed: %+v", p)
			}
		}
	}
	if opened != 1 || closed != 1 {
		t.Errorf("%d shell.opened and %d shell.closed, want one each", opened, closed)
	}

	// A client that goes away: the shell is killed and recorded.
	c, _, err = dialShell(t, e, v.ID, http.Header{"Authorization": {"Bearer " + e.Admin}})
	if err != nil {
		t.Fatal(err)
	}
	c.Write(ctx, websocket.MessageBinary, []byte("echo ready\n"))
	readUntil(t, c, "ready\r\n")
	c.CloseNow()
	stacktest.ReadUntil(t, st, "the second shell's end", func(ev event.Event) bool {
		p, ok := ev.Data.(event.ShellClosed)
		return ok && p.Reason == "disconnected"
	})

	// The cookie: only with this server's Origin.
	b := signIn(e, e.Alice, nil)
	ck := b.cookie.Name + "=" + b.cookie.Value
	for _, origin := range []string{"", "http://evil.example"} {
		_, resp, err := dialShell(t, e, v.ID, http.Header{"Cookie": {ck}, "Origin": {origin}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("a cookie shell from origin %q: %v %v, want 403", origin, err, resp)
		}
	}
	c, _, err = dialShell(t, e, v.ID, http.Header{"Cookie": {ck}, "Origin": {e.URL}})
	if err != nil {
		t.Fatalf("a cookie shell from the server's own page: %v", err)
	}
	c.Write(ctx, websocket.MessageBinary, []byte("echo h\"\"i\n"))
	readUntil(t, c, "hi\r\n")
	c.Close(websocket.StatusNormalClosure, "")

	// Bob's token does not see Alice's session; a plain GET is told to
	// upgrade.
	status, info, _ := e.doRaw(http.MethodGet, "/v1/sessions/"+v.ID+"/shell", "Bearer "+e.Bob, "", nil)
	if status != 404 {
		t.Errorf("Bob's shell in Alice's session: %d %+v", status, info)
	}
	status, info, _ = e.doRaw(http.MethodGet, "/v1/sessions/"+v.ID+"/shell", "Bearer "+e.Alice, "", nil)
	if status != 400 || !strings.Contains(info.Message, "is a WebSocket") {
		t.Errorf("a GET without the upgrade: %d %+v", status, info)
	}
}
