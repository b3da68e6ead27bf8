package slacksim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

// TestErrors: each mistake gets Slack's error code, HTTP 200 with
// {"ok": false, "error": ...}, and every answer validates against the
// method's described errors.
func TestErrors(t *testing.T) {
	w := newWorld(t, slacksim.Options{})
	lonely, err := w.srv.AddChannel(slacksim.ChannelSpec{Name: "lonely", Members: []string{w.alice.ID}, NoBot: true})
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, token string, args url.Values) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", w.srv.APIURL()+method, strings.NewReader(args.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
			TS    string `json:"ts"`
		}
		json.Unmarshal(b, &out)
		if out.OK {
			return resp.StatusCode, "ok:" + out.TS
		}
		return resp.StatusCode, out.Error
	}
	bot := w.tok.Bot
	v := func(kv ...string) url.Values {
		out := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	_, posted := call("chat.postMessage", bot, v("channel", w.general.ID, "text", "mine"))
	ts := strings.TrimPrefix(posted, "ok:")
	m, _ := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: "hers"})
	cases := []struct {
		method, token string
		args          url.Values
		want          string
	}{
		{"auth.test", "", nil, "not_authed"},
		{"auth.test", "xoxb-nope", nil, "invalid_auth"},
		{"auth.test", w.tok.App, nil, "not_allowed_token_type"},
		{"apps.connections.open", bot, nil, "not_allowed_token_type"},
		{"chat.postMessage", bot, v("channel", "C404404404", "text", "x"), "channel_not_found"},
		{"chat.postMessage", bot, v("channel", lonely.ID, "text", "x"), "not_in_channel"},
		{"chat.postMessage", bot, v("channel", w.general.ID), "no_text"},
		{"chat.postMessage", bot, v("channel", w.general.ID, "text", strings.Repeat("x", 40001)), "msg_too_long"},
		{"chat.postMessage", bot, v("channel", w.general.ID, "blocks", `{"type": "section"}`), "invalid_blocks"},
		{"chat.update", bot, v("channel", w.general.ID, "ts", "1000000000.000001", "text", "x"), "message_not_found"},
		{"chat.update", bot, v("channel", w.general.ID, "ts", m.TS, "text", "x"), "cant_update_message"},
		{"chat.delete", bot, v("channel", w.general.ID, "ts", m.TS), "cant_delete_message"},
		{"chat.postEphemeral", bot, v("channel", w.general.ID, "user", "U404404", "text", "x"), "user_not_in_channel"},
		{"chat.postEphemeral", bot, v("channel", lonely.ID, "user", w.bob.ID, "text", "x"), "user_not_in_channel"},
		{"chat.getPermalink", bot, v("channel", w.general.ID, "message_ts", "1000000000.000001"), "message_not_found"},
		{"reactions.add", bot, v("channel", w.general.ID, "timestamp", ts, "name", "Not An Emoji"), "invalid_name"},
		{"reactions.add", bot, v("channel", w.general.ID, "timestamp", ts, "name", "eyes"), "ok:"},
		{"reactions.add", bot, v("channel", w.general.ID, "timestamp", ts, "name", "eyes"), "already_reacted"},
		{"reactions.remove", bot, v("channel", w.general.ID, "timestamp", ts, "name", "tada"), "no_reaction"},
		{"reactions.add", bot, v("channel", w.general.ID, "timestamp", "1000000000.000001", "name", "eyes"), "message_not_found"},
		{"conversations.replies", bot, v("channel", w.general.ID, "ts", "1000000000.000001"), "thread_not_found"},
		{"conversations.replies", bot, v("channel", lonely.ID, "ts", ts), "channel_not_found"},
		{"conversations.info", bot, v("channel", "C404404404"), "channel_not_found"},
		{"users.info", bot, v("user", "U404404"), "user_not_found"},
		{"views.open", bot, v("trigger_id", "1.2.3", "view", `{"type": "modal"}`), "invalid_trigger_id"},
		{"chat.delete", bot, v("channel", w.general.ID, "ts", ts), "ok:"},
	}
	for _, c := range cases {
		w.clock.Advance(3 * time.Second) // past chat.*'s per-channel windows
		status, got := call(c.method, c.token, c.args)
		if status != 200 || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s %v: %d %q, want %q", c.method, c.args, status, got, c.want)
		}
	}
	// A trigger_id is good once, for 3 s.
	if err := w.srv.Command(slacksim.CommandSpec{User: w.alice.ID, Channel: w.general.ID, Command: "/harvest"}); err != nil {
		t.Fatal(err)
	}
	var f struct {
		TriggerID string `json:"trigger_id"`
	}
	es := w.srv.Envelopes()
	json.Unmarshal(es[len(es)-1].Payload, &f)
	view := `{"type": "modal", "title": {"type": "plain_text", "text": "Hi"}, "blocks": []}`
	w.clock.Advance(3 * time.Second)
	if _, got := call("views.open", bot, v("trigger_id", f.TriggerID, "view", view)); got != "expired_trigger_id" {
		t.Errorf("a trigger_id 3 s old: %s", got)
	}
	if status, got := call("chat.nothing", bot, nil); status != 404 || got != "unknown_method" {
		t.Errorf("an unknown method: %d %s", status, got)
	}
	checkAnswers(t, w.srv)
}
