package slacksim_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/sim/slacksim/slackschema"
)

// world is a stand-in with alice and bob in #general (and the bot).
type world struct {
	srv     *slacksim.Server
	clock   *stacktest.Clock
	tok     slacksim.Tokens
	alice   slacksim.User
	bob     slacksim.User
	general slacksim.Channel
}

func newWorld(t *testing.T, opts slacksim.Options) *world {
	t.Helper()
	w := &world{}
	if opts.Clock == nil {
		// Near the wall clock: receivers check signatures' timestamps against it.
		w.clock = stacktest.NewClock()
		opts.Clock = w.clock
	}
	srv, err := slacksim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	w.srv = srv
	w.tok = srv.Tokens()
	if w.alice, err = srv.AddUser(slacksim.UserSpec{Name: "alice", RealName: "Alice Liddell", Email: "alice@example.com"}); err != nil {
		t.Fatal(err)
	}
	if w.bob, err = srv.AddUser(slacksim.UserSpec{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	if w.general, err = srv.AddChannel(slacksim.ChannelSpec{Name: "general", Members: []string{w.alice.ID, w.bob.ID}}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) mention() string { return "<@" + w.tok.BotUserID + ">" }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// checkExchanges validates every Web API call in the request log and
// every event the stand-in produced against Slack's descriptions, and
// returns the methods that answered ok and the topics delivered.
func checkExchanges(t *testing.T, srv *slacksim.Server) (methods, topics map[string]bool) {
	t.Helper()
	return check(t, srv, true)
}

// checkAnswers is checkExchanges for a test that sends bad requests on
// purpose: only what the stand-in says is checked.
func checkAnswers(t *testing.T, srv *slacksim.Server) {
	t.Helper()
	check(t, srv, false)
}

func check(t *testing.T, srv *slacksim.Server, requests bool) (methods, topics map[string]bool) {
	t.Helper()
	methods, topics = map[string]bool{}, map[string]bool{}
	calls, envs := srv.Calls(), srv.Envelopes()
	errs := slackschema.CheckAnswers(calls, envs)
	if requests {
		errs = slackschema.CheckExchanges(calls, envs)
	}
	for _, err := range errs {
		t.Error(err)
	}
	for _, c := range calls {
		var ok struct{ OK bool }
		if json.Unmarshal(c.Response, &ok) == nil && ok.OK {
			methods[c.Method] = true
		}
	}
	for _, e := range envs {
		if e.Kind == slacksim.KindEventsAPI {
			topics[e.Topic] = true
		}
	}
	return methods, topics
}
