package slacksim_test

import (
	"slices"
	"testing"

	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/sim/slacksim/slackschema"
)

// TestDescriptionsCoverServer: the pinned descriptions are the files
// SOURCE.json names (their SHA-256 checked), from the pinned commit, and
// hold every method the stand-in serves but apps.connections.open
// (which Slack's description lacks) and every topic it delivers.
func TestDescriptionsCoverServer(t *testing.T) {
	src, err := slackschema.Source()
	if err != nil {
		t.Fatal(err)
	}
	if src.Repository != "slackapi/slack-api-specs" || src.Commit != "bc08db49625630e3585bf2f1322128ea04f2a7f3" || len(src.Web.SourceSHA256) != 64 {
		t.Errorf("SOURCE.json: %+v", src)
	}
	pinned := append(slices.Clone(src.Web.Kept), src.Web.Missing...)
	slices.Sort(pinned)
	if !slices.Equal(pinned, slacksim.Methods()) {
		t.Errorf("extract's methods %v, the stand-in's %v: run internal/extract again", pinned, slacksim.Methods())
	}
	if !slices.Equal(src.Web.Missing, []string{"apps.connections.open"}) {
		t.Errorf("missing from the description: %v", src.Web.Missing)
	}
	for _, m := range slacksim.Methods() {
		if m != "apps.connections.open" && !slackschema.HasMethod(m) {
			t.Errorf("%s: served but not in the description", m)
		}
	}
	if n := slackschema.Methods(); n != len(slacksim.Methods())-1 {
		t.Errorf("the trimmed description has %d methods", n)
	}
	for _, tp := range []string{"app.mention", "message", "message.channels", "message.groups", "message.im"} {
		if !slackschema.HasTopic(tp) {
			t.Errorf("topic %s: not in the description", tp)
		}
	}
}

// TestValidatorsReject: the checks are not vacuous.
func TestValidatorsReject(t *testing.T) {
	for _, m := range slacksim.Methods() {
		if m == "views.open" {
			continue // described as {"ok": true} and anything (see slackschema)
		}
		if slackschema.ValidateResponse(m, 200, 0, []byte(`{"ok": true, "zzz": 1}`)) == nil {
			t.Errorf("%s: an answer with an unknown field validates", m)
		}
	}
	bad := map[string]string{
		"users.info":            `{"ok": true, "user": {"id": "U1", "name": "x"}}`,                                                              // no profile; a bad id
		"conversations.info":    `{"ok": true, "channel": {"id": "C000000001", "name": "x"}}`,                                                   // most fields missing
		"chat.postMessage":      `{"ok": true, "channel": "C000000001", "ts": "1.2", "message": {"type": "message", "text": "x", "ts": "1.2"}}`, // bad ts
		"chat.update":           `{"ok": true, "channel": "C000000001", "ts": "1765000000.000001", "text": "", "message": {"text": "", "blocks": [{}]}}`,
		"conversations.replies": `{"ok": true, "messages": [{"type": "message", "text": "x", "ts": "1765000000.000001", "bot_id": "nope"}]}`,
		"reactions.add":         `{"ok": false, "error": "no_such_error"}`,
	}
	for m, body := range bad {
		if err := slackschema.ValidateResponse(m, 200, 0, []byte(body)); err == nil {
			t.Errorf("%s: %s validates", m, body)
		}
	}
	if slackschema.ValidateResponse("chat.update", 429, 0, []byte(`{"ok": false, "error": "ratelimited"}`)) == nil {
		t.Error("a 429 without Retry-After validates")
	}
	if slackschema.ValidateParams("chat.postMessage", map[string]any{"text": "x"}, true) == nil {
		t.Error("chat.postMessage without channel validates")
	}
	if slackschema.ValidateParams("chat.postMessage", map[string]any{"channel": "C1", "colour": "red"}, true) == nil {
		t.Error("an unknown argument validates")
	}
	if slackschema.ValidateParams("conversations.replies", map[string]any{"channel": "C1", "limit": "ten"}, true) == nil {
		t.Error("a limit that is not an integer validates")
	}
	for _, tp := range []string{"app.mention", "message", "message.im"} {
		if slackschema.ValidateEvent(tp, []byte(`{"type": "event_callback", "event": {"type": "message"}}`)) == nil {
			t.Errorf("topic %s: an event without its wrapper's fields validates", tp)
		}
	}
	// The "message" topic is message_deleted's: a new message fails it.
	ok := `{"token": "t", "team_id": "T1", "api_app_id": "A1", "type": "event_callback", "event_id": "Ev1", "event_time": 1, "authed_users": ["U1"], "event": {"type": "message", "ts": "1.1", "event_ts": "1.1", "channel": "C1", "text": "x"}}`
	if err := slackschema.ValidateEvent("message.channels", []byte(ok)); err != nil {
		t.Errorf("a plain message event: %v", err)
	}
	if slackschema.ValidateEvent("message", []byte(ok)) == nil {
		t.Error("a new message validates as the message topic (message_deleted)")
	}
}
