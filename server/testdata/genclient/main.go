// Command genclient drives a real server with the client oapi-codegen
// generates from its /openapi.json (TestGeneratedClient writes that client
// next to this file, as client.gen.go, through a build overlay). It checks
// that the generated types decode what the server sends, and exits 1 with
// what went wrong otherwise.
//
//	genclient URL TOKEN REPO
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 4 {
		fail("usage: genclient URL TOKEN REPO")
	}
	url, token, repo := os.Args[1], os.Args[2], os.Args[3]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := NewClientWithResponses(url, WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	check("NewClientWithResponses", err)

	h, err := c.HealthWithResponse(ctx)
	check("health", err)
	if h.JSON200 == nil || h.JSON200.Status != Ok {
		fail("health: %d %s", h.StatusCode(), h.Body)
	}

	me, err := c.MeWithResponse(ctx)
	check("me", err)
	if me.JSON200 == nil || me.JSON200.User == nil || me.JSON200.User.Id == "" || me.JSON200.Token.Id == "" || me.JSON200.Admin {
		fail("me: %d %s", me.StatusCode(), me.Body)
	}

	title, idle := "généré", "10m"
	created, err := c.CreateSessionWithResponse(ctx, CreateSessionJSONRequestBody{
		Title: &title, Repos: []RepoSpec{{Source: &repo}}, Limits: &Limits{IdleTimeout: &idle},
	})
	check("create", err)
	v := created.JSON201
	if v == nil {
		fail("create: %d %s", created.StatusCode(), created.Body)
	}
	if v.Limits.IdleTimeout == nil || *v.Limits.IdleTimeout != "10m" || v.Title == nil || *v.Title != title || v.Queue == nil ||
		v.User == nil || *v.User != me.JSON200.User.Id {
		fail("create: the view decoded as %+v from %s", v, created.Body)
	}

	got, err := c.GetSessionWithResponse(ctx, v.Id)
	check("get", err)
	if got.JSON200 == nil || got.JSON200.Id != v.Id || got.JSON200.Limits.MaxLifetime == nil {
		fail("get: %d %s", got.StatusCode(), got.Body)
	}
	list, err := c.ListSessionsWithResponse(ctx, &ListSessionsParams{})
	check("list", err)
	if list.JSON200 == nil || !slices.ContainsFunc(list.JSON200.Sessions, func(s Session) bool { return s.Id == v.Id }) {
		fail("list: %d %s", list.StatusCode(), list.Body)
	}
	// The first event is journaled just after the reply: wait for it.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		page, err := c.EventLogWithResponse(ctx, v.Id, &EventLogParams{})
		check("log", err)
		if page.JSON200 == nil {
			fail("log: %d %s", page.StatusCode(), page.Body)
		}
		if len(page.JSON200.Events) > 0 {
			if ev := page.JSON200.Events[0]; ev.Seq != 1 || ev.Type != "session.state" || page.JSON200.LastSeq < 1 {
				fail("log: the first event decoded as %+v from %s", ev, page.Body)
			}
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			fail("log: no event within a minute: %s", page.Body)
		}
	}

	// Errors decode as the documented envelope, with every problem.
	mode := CreateRequestMode("later")
	bad, err := c.CreateSessionWithResponse(ctx, CreateSessionJSONRequestBody{Repos: []RepoSpec{}, Mode: &mode})
	check("invalid create", err)
	if bad.JSON400 == nil || bad.JSON400.Error.Code != ErrorInfoCodeInvalid || bad.JSON400.Error.Details == nil || len(*bad.JSON400.Error.Details) < 2 {
		fail("invalid create: %d %s", bad.StatusCode(), bad.Body)
	}
	far := int64(1 << 40)
	ahead, err := c.StreamEventsWithResponse(ctx, v.Id, &StreamEventsParams{Since: &far})
	check("events past the last seq", err)
	if ahead.JSON400 == nil || !strings.Contains(ahead.JSON400.Error.Message, "past the session's last event") {
		fail("events past the last seq: %d %s", ahead.StatusCode(), ahead.Body)
	}

	del, err := c.DeleteSessionWithResponse(ctx, v.Id)
	check("delete", err)
	if del.StatusCode() != http.StatusNoContent {
		fail("delete: %d %s", del.StatusCode(), del.Body)
	}
	gone, err := c.GetSessionWithResponse(ctx, v.Id)
	check("get after delete", err)
	if gone.JSON404 == nil || gone.JSON404.Error.Code != ErrorInfoCodeNotFound {
		fail("get after delete: %d %s", gone.StatusCode(), gone.Body)
	}
	fmt.Println("ok")
}

func check(what string, err error) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "genclient: "+format+"\n", args...)
	os.Exit(1)
}
