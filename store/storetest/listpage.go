package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testListSessionsPaged pages through a list with SessionFilter.After: the
// pages, end to end, are the whole list in order, with sessions created at
// the same instant told apart by id; a session created between two pages
// neither repeats nor shifts the pages after it; filters hold on every page.
func testListSessionsPaged(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	// 25 sessions; three at a time share their CreatedAt.
	for i := range 25 {
		owner := "a"
		if i%4 == 0 {
			owner = "b"
		}
		c := base.Add(time.Duration(i/3) * time.Minute)
		mustCreate(t, st, &store.Session{ID: fmt.Sprintf("s%02d", i), Owner: owner, State: store.StateSuspended, CreatedAt: c, UpdatedAt: c})
	}
	ids := func(ss []*store.Session) []string {
		out := []string{}
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	for _, f := range []store.SessionFilter{{}, {Owner: "a"}, {States: []store.State{store.StateSuspended}}} {
		all, err := st.ListSessions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 2, 3, 4, 7, 25, 30} {
			var got []string
			lateMade := false
			g := f
			g.Limit = size
			for page := 0; ; page++ {
				if page > 30 {
					t.Fatalf("%+v, pages of %d: more pages than sessions", f, size)
				}
				ss, err := st.ListSessions(ctx, g)
				if err != nil {
					t.Fatal(err)
				}
				if len(ss) > size {
					t.Fatalf("%+v: a page of %d sessions, limit %d", f, len(ss), size)
				}
				got = append(got, ids(ss)...)
				if len(ss) < size {
					break
				}
				k := store.KeyOf(ss[len(ss)-1])
				g.After = &k
				if page == 0 && size == 4 && f.Owner == "" {
					// Newer than every listed one: it belongs before page 1.
					late := base.Add(time.Hour)
					mustCreate(t, st, &store.Session{ID: "late", Owner: "a", State: store.StateSuspended, CreatedAt: late, UpdatedAt: late})
					lateMade = true
				}
			}
			if lateMade {
				if err := st.DeleteSession(ctx, "late"); err != nil {
					t.Fatal(err)
				}
			}
			if want := ids(all); !reflect.DeepEqual(got, want) {
				t.Errorf("%+v, pages of %d: %v, want %v", f, size, got, want)
			}
		}
	}
	// A key with no session left after it: an empty page.
	last := store.SessionKey{CreatedAt: base, ID: "s00"}
	if ss, err := st.ListSessions(ctx, store.SessionFilter{After: &last}); err != nil || len(ss) != 0 {
		t.Errorf("after the oldest: %v, %v", ids(ss), err)
	}
	// A key between two sessions of the same instant.
	mid := store.SessionKey{CreatedAt: base, ID: "s01"}
	if ss, err := st.ListSessions(ctx, store.SessionFilter{After: &mid}); err != nil || !reflect.DeepEqual(ids(ss), []string{"s00"}) {
		t.Errorf("after s01: %v, %v", ids(ss), err)
	}
}

// BenchmarkListPage measures a page of GET /v1/sessions' store query with n
// suspended sessions in st (made here, with CreatedAt a millisecond apart):
// the first page, one in the middle (through After) and the last.
func BenchmarkListPage(b *testing.B, st store.Store, n, size int) {
	ctx := context.Background()
	for i := range n {
		c := base.Add(time.Duration(i) * time.Millisecond)
		s := &store.Session{ID: fmt.Sprintf("s-bench%06d", i), Owner: "tok-bench", State: store.StateSuspended, Title: "a suspended session",
			Agent: "builtin", Model: "anthropic/claude-sonnet-4-5", Backend: "local", CreatedAt: c, UpdatedAt: c}
		if err := st.CreateSession(ctx, s, nil); err != nil {
			b.Fatal(err)
		}
	}
	keyAt := func(i int) *store.SessionKey { // the session i-th newest
		j := n - 1 - i
		return &store.SessionKey{CreatedAt: base.Add(time.Duration(j) * time.Millisecond), ID: fmt.Sprintf("s-bench%06d", j)}
	}
	for _, p := range []struct {
		name  string
		after *store.SessionKey
	}{{"first", nil}, {"middle", keyAt(n/2 - 1)}, {"last", keyAt(n - size - 1)}} {
		b.Run(fmt.Sprintf("%s-page-of-%d", p.name, size), func(b *testing.B) {
			for b.Loop() {
				ss, err := st.ListSessions(ctx, store.SessionFilter{Owner: "tok-bench", Limit: size, After: p.after})
				if err != nil {
					b.Fatal(err)
				}
				if len(ss) != size {
					b.Fatalf("a page of %d sessions, want %d", len(ss), size)
				}
			}
		})
	}
}
