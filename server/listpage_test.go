package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
)

// TestListPages: GET /v1/sessions answers pages, newest first, each with a
// next_cursor but the last; the pages end to end are the whole list, for an
// admin and for a token that sees its own sessions only; a caller that sends
// no cursor gets the first page as before; the client follows the pages; a
// bad cursor or limit is a 400 saying what to do.
func TestListPages(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	// Suspended sessions are store rows only: made in the store, as many
	// as a page boundary needs, some at the same instant.
	t0 := time.Now().Add(-time.Hour).UTC()
	var alices, all []string
	for i := range 11 {
		owner := e.AliceID
		if i%3 == 0 {
			owner = e.BobID
		}
		id := fmt.Sprintf("s-page%02d", i)
		at := t0.Add(time.Duration(i/2) * time.Second)
		if err := e.Store.CreateSession(ctx, &store.Session{ID: id, Owner: owner, User: store.UserIDForToken(owner), State: store.StateSuspended, Backend: "local", CreatedAt: at, UpdatedAt: at}, nil); err != nil {
			t.Fatal(err)
		}
		all = append([]string{id}, all...)
		if owner == e.AliceID {
			alices = append([]string{id}, alices...)
		}
	}
	// (Ties are ordered by id, descending, like the rest.)
	slices.SortStableFunc(all, func(a, b string) int { return -strings.Compare(a, b) })
	slices.SortStableFunc(alices, func(a, b string) int { return -strings.Compare(a, b) })

	pages := func(c *client.Client, size int) (ids []string, n int) {
		t.Helper()
		o := client.ListOptions{Limit: size}
		for {
			p, err := c.ListSessionsPage(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			n++
			if len(p.Sessions) > size || (p.NextCursor != "" && len(p.Sessions) != size) || (p.NextCursor == "" && len(p.Sessions) == 0 && n > 1) {
				t.Fatalf("page %d of %d: %d sessions, next %q", n, size, len(p.Sessions), p.NextCursor)
			}
			for _, s := range p.Sessions {
				ids = append(ids, s.ID)
			}
			if p.NextCursor == "" {
				return ids, n
			}
			o.Cursor = p.NextCursor
		}
	}
	for _, size := range []int{1, 2, 4, 11, 12, 1000} {
		if got, n := pages(e.AdminC, size); !slices.Equal(got, all) || n != max(1, (len(all)+size-1)/size) {
			t.Errorf("the admin's pages of %d: %v in %d pages, want %v", size, got, n, all)
		}
		if got, _ := pages(e.AliceC, size); !slices.Equal(got, alices) {
			t.Errorf("alice's pages of %d: %v, want %v", size, got, alices)
		}
	}
	// The client follows the pages; a limit stops it.
	for _, tc := range []struct {
		limit, page int
		want        []string
	}{{0, 0, all}, {3, 0, all[:3]}, {11, 0, all}, {50, 0, all}, {0, 2, all}, {5, 2, all[:5]}, {0, 11, all}, {0, 4, all}} {
		list, err := e.AdminC.ListSessions(ctx, client.ListOptions{Limit: tc.limit, PageSize: tc.page})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range list {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ListSessions(limit %d, pages of %d): %v, want %v", tc.limit, tc.page, got, tc.want)
		}
	}
	// Without a cursor or a limit: the first page, of up to 1000, as before
	// there were pages; no next_cursor when that is all.
	if body := e.rawJSON(http.MethodGet, "/v1/sessions", e.Admin); !strings.Contains(body, `"sessions"`) || strings.Contains(body, "next_cursor") {
		t.Errorf("GET /v1/sessions without a cursor: %s", body)
	}
	// Bob's cursor in Alice's hands: her filter still holds.
	p, err := e.BobC.ListSessionsPage(ctx, client.ListOptions{Limit: 1})
	if err != nil || p.NextCursor == "" {
		t.Fatalf("bob's first page: %+v, %v", p, err)
	}
	if q, err := e.AliceC.ListSessionsPage(ctx, client.ListOptions{Limit: 100, Cursor: p.NextCursor}); err != nil {
		t.Fatal(err)
	} else {
		for _, s := range q.Sessions {
			if s.Owner != e.AliceID {
				t.Errorf("alice listed %s of %s with bob's cursor", s.ID, s.Owner)
			}
		}
	}

	for _, tc := range []struct{ query, want string }{
		{"cursor=", "cursor \"\": empty"},
		{"cursor=%21%21", "not a cursor this server gave out"},
		{"cursor=" + url.QueryEscape("bm90IGEgY3Vyc29y"), "not a cursor this server gave out"}, // "not a cursor"
		{"cursor=MS4xMi4", "not a cursor this server gave out"},                                // "1.12." (no id)
		{"cursor=Mi4xMi5z", "older version"},                                                   // "2.12.s"
		{"limit=0", "give a whole number from 1 to 1000"},
		{"limit=1001", "give a whole number from 1 to 1000"},
		{"limit=ten", "give a whole number from 1 to 1000"},
		{"page=2", "takes state, limit, cursor, updated_before, scope and owner"},
	} {
		status, info, _ := e.doRaw(http.MethodGet, "/v1/sessions?"+tc.query, "Bearer "+e.Admin, "", nil)
		if status != http.StatusBadRequest || info.Code != server.CodeBadRequest || !strings.Contains(info.Message, tc.want) {
			t.Errorf("GET /v1/sessions?%s: %d %+v, want 400 saying %q", tc.query, status, info, tc.want)
		}
	}
}
