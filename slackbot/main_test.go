package slackbot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

// TestWords: a message's words, Slack's links read as what they name.
func TestWords(t *testing.T) {
	got := words("<@U123> please fix <https://github.com/acme/widget|widget link>, and <https://github.com/acme/gadget.git> in `calc`; see <#C1|general> <https://example.com|docs>!")
	want := []string{"please", "fix", "acme/widget", "and", "acme/gadget", "in", "calc", "see", "docs"}
	if !slices.Equal(got, want) {
		t.Errorf("words: %q, want %q", got, want)
	}
}

// TestRepoIn: owner/name names a GitHub repository only when the server
// has one; a directory under a root is named by its name; a file, a
// missing directory and a path are not.
func TestRepoIn(t *testing.T) {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "calc"), 0o755)
	os.WriteFile(filepath.Join(root, "notes"), []byte("x"), 0o644)
	b := &Bot{cfg: Config{RepoRoots: []string{root}}}
	for text, want := range map[string]string{
		"fix calc":                 "calc",
		"fix notes":                "",
		"fix acme/widget":          "",
		"fix ../calc":              "",
		"fix nothing here":         "",
		"in calc, and acme/widget": "calc",
	} {
		r, ok := b.repoIn(text)
		if ok != (want != "") || r.name != want {
			t.Errorf("repoIn(%q): %q %v, want %q", text, r.name, ok, want)
		}
	}
	if r, ok := b.repoIn("fix calc"); !ok || r.spec.Source != filepath.Join(root, "calc") || r.ref.Dir != r.spec.Source {
		t.Errorf("calc: %+v", r)
	}
	b.cfg.GitHub = true
	if r, ok := b.repoIn("fix acme/widget in calc"); !ok || r.spec.GitHub != "acme/widget" || r.ref.GitHub != "acme/widget" {
		t.Errorf("with GitHub: %+v %v", r, ok)
	}
}

// TestRate: against the stand-in, a storm's 429s are waited out (no call
// inside a Retry-After) and the call made after it; edits of a channel
// are at most one per interval, which chat.update's limit never refuses.
func TestRate(t *testing.T) {
	srv, err := slacksim.Start(slacksim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tok := srv.Tokens()
	u, _ := srv.AddUser(slacksim.UserSpec{Name: "alice"})
	ch, err := srv.AddChannel(slacksim.ChannelSpec{Name: "general", Members: []string{u.ID}})
	if err != nil {
		t.Fatal(err)
	}
	api := slack.New(tok.Bot, slack.OptionAPIURL(srv.APIURL()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := newRate(time.Second)
	var ts string
	if err := r.call(ctx, func(ctx context.Context) error {
		_, ts, err = api.PostMessageContext(ctx, ch.ID, slack.MsgOptionText("hello", false))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := r.edit(ctx, ch.ID, func(ctx context.Context) error {
			_, _, _, err := api.UpdateMessageContext(ctx, ch.ID, ts, slack.MsgOptionText("edit "+string(rune('1'+i)), false))
			return err
		}); err != nil {
			t.Fatalf("edit %d: %v", i, err)
		}
	}
	if _, err := srv.Storm(slacksim.StormSpec{For: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := r.call(ctx, func(ctx context.Context) error {
		return api.AddReactionContext(ctx, "eyes", slack.NewRefToMessage(ch.ID, ts))
	}); err != nil {
		t.Fatalf("a call through a storm: %v", err)
	}
	var until time.Time
	refused := 0
	for _, c := range srv.Calls() {
		if c.Time.Before(until) {
			t.Errorf("%s at %s inside a Retry-After ending %s", c.Method, c.Time, until)
		}
		if c.Status == 429 {
			refused++
			if c.Method == "chat.update" {
				t.Errorf("an edit refused: %s", c.Time)
			}
			until = c.Time.Add(time.Duration(c.RetryAfter) * time.Second)
		}
	}
	if refused == 0 {
		t.Error("the storm refused nothing")
	}
	// A cancelled wait ends at once.
	r.until = time.Now().Add(time.Hour)
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := r.call(cctx, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a call inside a window, cancelled: %v", err)
	}
}
