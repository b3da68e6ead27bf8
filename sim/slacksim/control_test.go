package slacksim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

func control(t *testing.T, w *world, method, path, body string) (int, map[string]any, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, w.srv.URL()+"/_sim/slack/"+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return resp.StatusCode, m, b
}

// TestControlAPI: the control API over HTTP acts as people and as
// Slack, with 400 and 404 for bad input; a person's edit and delete are
// message_changed and message_deleted events, which validate (the
// latter against the description's "message" topic).
func TestControlAPI(t *testing.T) {
	w := newWorld(t, slacksim.Options{})
	code, m, _ := control(t, w, "POST", "users", `{"name": "carol", "email": "carol@example.com"}`)
	if code != 200 || !strings.HasPrefix(m["id"].(string), "U") {
		t.Fatalf("users: %d %v", code, m)
	}
	carol := m["id"].(string)
	code, m, _ = control(t, w, "POST", "channels", `{"name": "ops", "members": ["`+carol+`"]}`)
	if code != 200 {
		t.Fatalf("channels: %d %v", code, m)
	}
	ops := m["id"].(string)
	code, m, _ = control(t, w, "POST", "messages", `{"user": "`+carol+`", "channel": "`+ops+`", "text": "deploy?"}`)
	if code != 200 || m["ts"] == "" {
		t.Fatalf("messages: %d %v", code, m)
	}
	ts := m["ts"].(string)
	if code, m, _ = control(t, w, "POST", "edits", `{"channel": "`+ops+`", "ts": "`+ts+`", "text": "deploy now?"}`); code != 200 {
		t.Fatalf("edits: %d %v", code, m)
	}
	if code, m, _ = control(t, w, "POST", "deletes", `{"channel": "`+ops+`", "ts": "`+ts+`"}`); code != 200 {
		t.Fatalf("deletes: %d %v", code, m)
	}
	code, _, b := control(t, w, "GET", "envelopes", "")
	var es []slacksim.Envelope
	json.Unmarshal(b, &es)
	if code != 200 || len(es) != 3 || es[1].Topic != "message.channels" || es[2].Topic != "message" {
		t.Fatalf("envelopes: %d %s", code, b)
	}
	var changed struct {
		Event struct {
			Subtype string
			Message struct{ Text string }
		}
	}
	json.Unmarshal(es[1].Payload, &changed)
	if changed.Event.Subtype != "message_changed" || changed.Event.Message.Text != "deploy now?" {
		t.Errorf("edit: %s", es[1].Payload)
	}
	if code, _, b = control(t, w, "GET", "messages?channel="+ops, ""); code != 200 || string(b) != "null\n" {
		t.Errorf("messages after the delete: %d %s", code, b)
	}
	if code, m, _ = control(t, w, "POST", "storm", `{"seconds": 5, "methods": ["auth.test"]}`); code != 200 {
		t.Errorf("storm: %d %v", code, m)
	}
	if code, m, _ = control(t, w, "POST", "limits", `{"method": "users.info", "limits": [{"count": 1, "per_seconds": 60}]}`); code != 200 {
		t.Errorf("limits: %d %v", code, m)
	}
	if code, m, _ = control(t, w, "POST", "disconnect", `{"reason": "warning"}`); code != 200 || m["connections"] != 0.0 {
		t.Errorf("disconnect: %d %v", code, m)
	}
	if code, _, b = control(t, w, "GET", "tokens", ""); code != 200 || !strings.Contains(string(b), `"bot_token":"xoxb-`) {
		t.Errorf("tokens: %d %s", code, b)
	}
	bad := []struct{ method, path, body, want string }{
		{"POST", "nothing", `{}`, "no control nothing"},
		{"GET", "users", ``, "users takes POST"},
		{"POST", "users", `{"name": "x", "colour": "red"}`, `unknown field "colour"`},
		{"POST", "messages", `{"user": "U404", "channel": "` + ops + `", "text": "x"}`, `no person "U404"`},
		{"POST", "clicks", `{"user": "` + carol + `", "channel": "` + ops + `", "ts": "1.2", "action_id": "stop"}`, "no message 1.2"},
		{"POST", "commands", `{"user": "` + carol + `", "channel": "` + ops + `", "command": "harvest"}`, "a slash and a word"},
		{"POST", "disconnect", `{"reason": "bored"}`, `disconnect reason "bored"`},
		{"POST", "storm", `{"seconds": 0}`, "storm: for must be positive"},
		{"POST", "limits", `{"method": "chat.nothing"}`, `no method "chat.nothing"`},
		{"POST", "request-url", `{"url": "ftp://x"}`, `request URL "ftp://x"`},
		{"POST", "verify-url", `{}`, "no request URL: Socket Mode is on"},
		{"GET", "messages", ``, "give ?channel=ID"},
	}
	for _, c := range bad {
		code, m, _ := control(t, w, c.method, c.path, c.body)
		want := 400
		if strings.HasPrefix(c.want, "no control") {
			want = 404
		} else if strings.HasSuffix(c.want, "takes POST") {
			want = 405
		}
		if code != want || !strings.Contains(m["error"].(string), c.want) {
			t.Errorf("%s %s: %d %v, want %d with %q", c.method, c.path, code, m, want, c.want)
		}
	}
	checkExchanges(t, w.srv)
}
