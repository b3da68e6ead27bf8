package slackbot

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// # The Events API over HTTP
//
// ServeHTTP takes POST /v1/slack/events: Slack's event callbacks (JSON),
// clicks (a form with a payload field) and slash commands (a form with a
// command field), as the app's Request URL, Interactivity URL and
// command URL may all say. Each request is checked first: its
// X-Slack-Signature must be v0's HMAC-SHA256 of "v0:TIMESTAMP:BODY" with
// the signing secret, and its X-Slack-Request-Timestamp within 5 minutes
// of now, else 401 and nothing is done. A url_verification is answered
// with its challenge. A retry (X-Slack-Retry-Num) is an event seen
// before unless its first delivery never arrived: its event_id decides
// (events.go).

// maxBody bounds a request's body.
const maxBody = 1 << 20

// ServeHTTP receives Slack's HTTP deliveries.
func (b *Bot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST Slack's deliveries here", http.StatusMethodNotAllowed)
		return
	}
	ct := r.Header.Get("Content-Type")
	form := strings.HasPrefix(ct, "application/x-www-form-urlencoded")
	if !form && !strings.HasPrefix(ct, "application/json") {
		http.Error(w, "Slack sends application/json (events) or application/x-www-form-urlencoded (clicks, commands), not "+ct, http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxBody {
		http.Error(w, "the body is over 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	if b.cfg.SigningSecret == "" {
		http.Error(w, "this server takes Slack's events over Socket Mode", http.StatusNotFound)
		return
	}
	sv, err := slack.NewSecretsVerifier(r.Header, b.cfg.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		b.log.Warn("a Slack delivery refused", "err", err, "retry", r.Header.Get("X-Slack-Retry-Num"))
		http.Error(w, "the request's Slack signature or timestamp is not valid: "+err.Error(), http.StatusUnauthorized)
		return
	}
	if form {
		b.serveForm(w, body)
		return
	}
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		http.Error(w, "not an Events API payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	switch ev.Type {
	case slackevents.URLVerification:
		var v slackevents.ChallengeResponse
		if err := json.Unmarshal(body, &v); err != nil {
			http.Error(w, "a url_verification without its challenge", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, v.Challenge)
		return
	case slackevents.CallbackEvent:
		if !b.accept(ev) {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "the event could not be recorded; Slack will send it again", http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// serveForm takes a click or a slash command.
func (b *Bot) serveForm(w http.ResponseWriter, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "a form that does not parse: "+err.Error(), http.StatusBadRequest)
		return
	}
	if p := form.Get("payload"); p != "" {
		var cb slack.InteractionCallback
		if err := json.Unmarshal([]byte(p), &cb); err != nil {
			http.Error(w, "an interaction payload that does not parse: "+err.Error(), http.StatusBadRequest)
			return
		}
		b.goFn(func() {
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			defer cancel()
			b.interaction(ctx, cb)
		})
		w.WriteHeader(http.StatusOK)
		return
	}
	if form.Get("command") == "" {
		http.Error(w, "a form with neither payload nor command", http.StatusBadRequest)
		return
	}
	c := slack.SlashCommand{Command: form.Get("command"), Text: form.Get("text"), UserID: form.Get("user_id"),
		ChannelID: form.Get("channel_id"), TeamID: form.Get("team_id"), ResponseURL: form.Get("response_url"), TriggerID: form.Get("trigger_id")}
	ctx, cancel := context.WithTimeout(b.ctx, 2500*time.Millisecond)
	text := b.command(ctx, c)
	cancel()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"response_type": "ephemeral", "text": text})
}
