package slacksim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

type delivery struct {
	path                  string
	retryNum, retryReason string
	kind                  string // event type, interaction type or command
}

// TestHTTPEvents: with a Request URL, url_verification, events,
// clicks and commands POSTed and signed as Slack signs them (checked
// with slack-go's verifier), a 500 and a timeout retried with
// X-Slack-Retry-Num and X-Slack-Retry-Reason, a command answered in the
// HTTP answer.
func TestHTTPEvents(t *testing.T) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	var mu sync.Mutex
	var got []delivery
	var refused []string     // signatures slack-go's verifier refused
	fail := map[string]int{} // event type → answers to fail
	hang := map[string]bool{}
	hanging := make(chan struct{}, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sv, err := slack.NewSecretsVerifier(r.Header, secret)
		if err != nil {
			mu.Lock()
			refused = append(refused, err.Error())
			mu.Unlock()
			http.Error(w, err.Error(), 401)
			return
		}
		body, _ := io.ReadAll(io.TeeReader(r.Body, &sv))
		if err := sv.Ensure(); err != nil {
			mu.Lock()
			refused = append(refused, err.Error())
			mu.Unlock()
			http.Error(w, err.Error(), 401)
			return
		}
		d := delivery{path: r.URL.Path, retryNum: r.Header.Get("X-Slack-Retry-Num"), retryReason: r.Header.Get("X-Slack-Retry-Reason")}
		switch r.Header.Get("Content-Type") {
		case "application/json":
			ev, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken())
			if err != nil {
				t.Errorf("event: %v", err)
				return
			}
			if ev.Type == slackevents.URLVerification {
				var c slackevents.ChallengeResponse
				json.Unmarshal(body, &c)
				w.Write([]byte(c.Challenge))
				return
			}
			d.kind = ev.InnerEvent.Type
		default:
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			if err := r.ParseForm(); err != nil {
				t.Errorf("form: %v", err)
			}
			if p := r.PostForm.Get("payload"); p != "" {
				var cb slack.InteractionCallback
				if err := json.Unmarshal([]byte(p), &cb); err != nil {
					t.Errorf("payload: %v", err)
				}
				d.kind = string(cb.Type) + ":" + cb.ActionCallback.BlockActions[0].ActionID
			} else {
				r.Body = io.NopCloser(strings.NewReader(string(body)))
				cmd, err := slack.SlashCommandParse(r)
				if err != nil {
					t.Errorf("command: %v", err)
				}
				d.kind = cmd.Command + " " + cmd.Text
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"response_type": "in_channel", "text": "all idle"}`))
			}
		}
		mu.Lock()
		got = append(got, d)
		n := fail[d.kind]
		fail[d.kind] = max(n-1, 0)
		h := hang[d.kind]
		hang[d.kind] = false
		mu.Unlock()
		if h {
			hanging <- struct{}{}
			<-r.Context().Done() // until the stand-in gives up on it
			return
		}
		if n > 0 {
			http.Error(w, "not now", 500)
		}
	}))
	t.Cleanup(hook.Close)

	w := newWorld(t, slacksim.Options{RequestURL: hook.URL, SigningSecret: secret})
	ctx := ctxT(t)
	if err := w.srv.VerifyURL(ctx); err != nil {
		t.Fatal(err)
	}
	fail["app_mention"] = 1
	hang["message"] = true
	m, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: w.mention() + " go"})
	if err != nil {
		t.Fatal(err)
	}
	// The message event hangs: 3 s on the clock later it is retried.
	select {
	case <-hanging:
	case <-ctx.Done():
		t.Fatal("the message event did not arrive")
	}
	if _, err := w.srv.WaitEnvelope(ctx, func(es []slacksim.Envelope) bool {
		return len(es) == 2 && es[1].State == slacksim.StateAcked && len(es[0].Attempts) == 1 && es[0].State == slacksim.StateSent
	}); err != nil {
		t.Fatalf("%v: %+v", err, w.srv.Envelopes())
	}
	w.clock.Advance(3 * time.Second)
	es, err := w.srv.WaitEnvelopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := es[0]; e.State != slacksim.StateAcked || len(e.Attempts) != 2 || e.Attempts[0].Outcome != "http_timeout" {
		t.Errorf("message event: %+v", e)
	}
	if e := es[1]; len(e.Attempts) != 2 || e.Attempts[0].Outcome != "http_error" || e.Attempts[0].Status != 500 {
		t.Errorf("app_mention: %+v", e)
	}

	// Clicks and commands to their own URLs (Slack's Interactivity
	// Request URL, the command's URL).
	if err := w.srv.SetRequestURLs(hook.URL+"/events", hook.URL+"/interactive", hook.URL+"/commands"); err != nil {
		t.Fatal(err)
	}
	// A click needs a button: the bot posts one.
	api := slack.New(w.tok.Bot, slack.OptionAPIURL(w.srv.APIURL()))
	_, ts, err := api.PostMessageContext(ctx, w.general.ID, slack.MsgOptionTS(m.TS), slack.MsgOptionBlocks(
		slack.NewActionBlock("a", slack.NewButtonBlockElement("stop", "1", slack.NewTextBlockObject("plain_text", "Stop", false, false)))))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.srv.Click(slacksim.ClickSpec{User: w.alice.ID, Channel: w.general.ID, TS: ts, ActionID: "stop"}); err != nil {
		t.Fatal(err)
	}
	if err := w.srv.Command(slacksim.CommandSpec{User: w.alice.ID, Channel: w.general.ID, Command: "/harvest", Text: "status"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.srv.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	var kinds []string
	paths := map[string]string{}
	for _, d := range got {
		kinds = append(kinds, d.kind+"#"+d.retryNum+d.retryReason)
		paths[d.kind] = d.path
	}
	mu.Unlock()
	want := map[string]bool{"message#": true, "app_mention#": true, "app_mention#1http_error": true, "message#1http_timeout": true,
		"block_actions:stop#": true, "/harvest status#": true}
	for _, k := range kinds {
		if !want[k] && !strings.HasPrefix(k, "message#") {
			t.Errorf("unexpected delivery %s", k)
		}
		delete(want, k)
	}
	if len(want) > 0 {
		t.Errorf("missing deliveries %v (got %v)", want, kinds)
	}
	if paths["block_actions:stop"] != "/interactive" || paths["/harvest status"] != "/commands" || paths["app_mention"] != "/" {
		t.Errorf("paths: %v", paths)
	}
	msgs := w.srv.Messages(w.general.ID)
	if last := msgs[len(msgs)-1]; last.Text != "all idle" || last.BotID == "" {
		t.Errorf("the command's in_channel answer: %+v", last)
	}

	mu.Lock()
	if len(refused) > 0 {
		t.Errorf("signatures refused: %v", refused)
	}
	mu.Unlock()

	// Spoiled on purpose: a wrong signature, then a timestamp 10 minutes
	// old; each refused (401) until the stand-in signs right again.
	for _, spoil := range []slacksim.TamperSpec{{BadSignature: true}, {TimestampSkew: 10 * time.Minute}} {
		w.srv.Tamper(spoil)
		if _, err := w.srv.Post(slacksim.PostSpec{User: w.bob.ID, Channel: w.general.ID, Text: "spoiled"}); err != nil {
			t.Fatal(err)
		}
		es, err := w.srv.WaitEnvelope(ctx, func(es []slacksim.Envelope) bool {
			e := es[len(es)-1]
			return len(e.Attempts) == 2 && e.State == slacksim.StateWaiting
		})
		if err != nil {
			for _, e := range es {
				t.Logf("%s %s %+v", e.Topic, e.State, e.Attempts)
			}
			t.Fatal(err)
		}
		if a := es[len(es)-1].Attempts; a[0].Status != 401 || a[1].Status != 401 || a[0].Outcome != "http_error" {
			t.Errorf("%+v: attempts %+v", spoil, a)
		}
		w.srv.Tamper(slacksim.TamperSpec{})
		w.clock.Advance(time.Minute)
		if _, err := w.srv.WaitEnvelopes(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(refused) != 4 || !strings.Contains(refused[0], "invalid signature") || !strings.Contains(refused[2], "too old") {
		t.Errorf("refused: %q", refused)
	}
	mu.Unlock()

	// A receiver that does not echo the challenge fails verification.
	if err := w.srv.SetRequestURL(hook.URL + "/nothing"); err != nil {
		t.Fatal(err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) }))
	defer bad.Close()
	w.srv.SetRequestURL(bad.URL)
	if err := w.srv.VerifyURL(ctx); err == nil {
		t.Error("a wrong challenge answer verified")
	}
	checkExchanges(t, w.srv)
}

// TestRateLimits: chat.update about once a second per channel, 429 with
// Retry-After as slack-go reads it; a storm refuses everything until it
// ends, Retry-After counting down on the clock.
func TestRateLimits(t *testing.T) {
	w := newWorld(t, slacksim.Options{})
	ctx := ctxT(t)
	api := slack.New(w.tok.Bot, slack.OptionAPIURL(w.srv.APIURL()))
	_, ts, err := api.PostMessageContext(ctx, w.general.ID, slack.MsgOptionText("progress", false))
	if err != nil {
		t.Fatal(err)
	}
	update := func() error {
		_, _, _, err := api.UpdateMessageContext(ctx, w.general.ID, ts, slack.MsgOptionText("step", false))
		return err
	}
	if err := update(); err != nil {
		t.Fatal(err)
	}
	var rl *slack.RateLimitedError
	if err := update(); !errors.As(err, &rl) || rl.RetryAfter != time.Second {
		t.Fatalf("a second update in the same second: %v", err)
	}
	w.clock.Advance(time.Second)
	if err := update(); err != nil {
		t.Fatal(err)
	}
	// Other channels are not held back.
	other, _ := w.srv.AddChannel(slacksim.ChannelSpec{Name: "other"})
	_, ts2, err := api.PostMessageContext(ctx, other.ID, slack.MsgOptionText("x", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := api.UpdateMessageContext(ctx, other.ID, ts2, slack.MsgOptionText("y", false)); err != nil {
		t.Errorf("another channel: %v", err)
	}

	if _, err := w.srv.Storm(slacksim.StormSpec{For: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.AuthTestContext(ctx); !errors.As(err, &rl) || rl.RetryAfter != 10*time.Second {
		t.Fatalf("in the storm: %v", err)
	}
	w.clock.Advance(4 * time.Second)
	if err := api.AddReactionContext(ctx, "eyes", slack.NewRefToMessage(w.general.ID, ts)); !errors.As(err, &rl) || rl.RetryAfter != 6*time.Second {
		t.Fatalf("in the storm, 4 s on: %v", err)
	}
	w.clock.Advance(6 * time.Second)
	if _, err := api.AuthTestContext(ctx); err != nil {
		t.Fatalf("after the storm: %v", err)
	}
	refused := 0
	for _, c := range w.srv.Calls() {
		if c.Status == 429 {
			refused++
		}
	}
	if refused != 3 {
		t.Errorf("%d refused calls logged, want 3", refused)
	}
	// A tier: 20 a minute for reactions.remove (tier 2), the 21st refused.
	if err := w.srv.SetLimit("reactions.remove", slacksim.Limit{Count: 2, Per: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		err := api.RemoveReactionContext(ctx, "eyes", slack.NewRefToMessage(w.general.ID, ts))
		if i < 2 && (err == nil || err.Error() != "no_reaction") {
			t.Errorf("remove %d: %v", i, err)
		}
		if i == 2 && (!errors.As(err, &rl) || rl.RetryAfter != time.Minute) {
			t.Errorf("remove %d: %v", i, err)
		}
	}
	_ = context.Background
	checkExchanges(t, w.srv)
}
