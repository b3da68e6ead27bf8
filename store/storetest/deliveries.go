package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testDeliveries: a delivery is stored once (a redelivery is a conflict),
// listed while pending oldest first, counted per attempt, finished once,
// and pruned only when finished.
func testDeliveries(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	d1 := &store.Delivery{ID: "72d3162e-1", Event: "issue_comment", Payload: []byte(`{"action":"created"}`), ReceivedAt: base}
	d2 := &store.Delivery{ID: "72d3162e-2", Event: "issues", Payload: []byte(`{}`), ReceivedAt: base.Add(1e6)}
	for _, d := range []*store.Delivery{d2, d1} {
		if err := st.AddDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if d1.State != store.DeliveryPending {
		t.Fatalf("a new delivery is %q", d1.State)
	}
	again := &store.Delivery{ID: d1.ID, Event: "issue_comment", Payload: []byte(`{"other":1}`)}
	if err := st.AddDelivery(ctx, again); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a redelivery: %v, want ErrConflict", err)
	}
	// One known at its receipt to need nothing is stored done, never
	// pending; and is a conflict like any other when delivered again.
	d3 := &store.Delivery{ID: "72d3162e-3", Event: "issues", Payload: []byte(`{"action":"opened"}`), ReceivedAt: base.Add(2e6),
		State: store.DeliveryDone, Result: "ignored: issue opened"}
	if err := st.AddDelivery(ctx, d3); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetDelivery(ctx, d3.ID); err != nil || got.State != store.DeliveryDone || got.Result != "ignored: issue opened" || got.Attempts != 0 || got.DoneAt.IsZero() {
		t.Fatalf("a delivery stored done: %+v, %v", got, err)
	}
	if err := st.AddDelivery(ctx, &store.Delivery{ID: d3.ID, Event: "issues", State: store.DeliveryDone, Result: "x"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a redelivery of one stored done: %v, want ErrConflict", err)
	}
	p, err := st.PendingDeliveries(ctx, 0)
	if err != nil || len(p) != 2 || p[0].ID != d1.ID || string(p[0].Payload) != `{"action":"created"}` || !p[0].ReceivedAt.Equal(base) {
		t.Fatalf("pending = %+v, %v", p, err)
	}
	if p, _ := st.PendingDeliveries(ctx, 1); len(p) != 1 {
		t.Fatalf("limit 1 gave %d", len(p))
	}
	for want := 1; want <= 2; want++ {
		d, err := st.BeginDelivery(ctx, d1.ID)
		if err != nil || d.Attempts != want {
			t.Fatalf("attempt %d: %+v, %v", want, d, err)
		}
	}
	if err := st.FinishDelivery(ctx, d1.ID, "bogus", ""); err == nil {
		t.Fatal("a bogus state accepted")
	}
	if err := st.FinishDelivery(ctx, d1.ID, store.DeliveryDone, "session s-1"); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishDelivery(ctx, d1.ID, store.DeliveryFailed, "x"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("finishing twice: %v", err)
	}
	if _, err := st.BeginDelivery(ctx, d1.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("beginning a done delivery: %v", err)
	}
	if _, err := st.BeginDelivery(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("beginning a missing delivery: %v", err)
	}
	got, err := st.GetDelivery(ctx, d1.ID)
	if err != nil || got.State != store.DeliveryDone || got.Result != "session s-1" || got.Attempts != 2 || got.DoneAt.IsZero() {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if p, _ := st.PendingDeliveries(ctx, 0); len(p) != 1 || p[0].ID != d2.ID {
		t.Fatalf("pending after finishing = %+v", p)
	}
	n, err := st.PruneDeliveries(ctx, base.Add(1e9))
	if err != nil || n != 2 {
		t.Fatalf("prune = %d, %v (want the two done ones only)", n, err)
	}
	if _, err := st.GetDelivery(ctx, d2.ID); err != nil {
		t.Fatalf("the pending delivery was pruned: %v", err)
	}
	if _, err := st.GetDelivery(ctx, d1.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the pruned delivery: %v", err)
	}
}

// testDeliveryQueue: a failed attempt makes a delivery due later with why;
// one held back by a limit gives its attempt back; a failed delivery is
// replayed once however many ask at once (the others are conflicts), a
// pending or done one is not; the list is newest first, by state, bounded.
func testDeliveryQueue(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for i, id := range []string{"q-1", "q-2", "q-3"} {
		if err := st.AddDelivery(ctx, &store.Delivery{ID: id, Event: "issue_comment", Payload: []byte(`{}`), ReceivedAt: base.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.BeginDelivery(ctx, "q-1"); err != nil {
		t.Fatal(err)
	}
	due := base.Add(time.Minute)
	if err := st.RetryDelivery(ctx, "q-1", due, "GitHub answered 502"); err != nil {
		t.Fatal(err)
	}
	d, err := st.GetDelivery(ctx, "q-1")
	if err != nil || d.State != store.DeliveryPending || d.Attempts != 1 || !d.NotBefore.Equal(due) || d.Result != "GitHub answered 502" {
		t.Fatalf("after a retry: %+v, %v", d, err)
	}
	if _, err := st.BeginDelivery(ctx, "q-1"); err != nil {
		t.Fatal(err)
	}
	later := base.Add(time.Hour)
	if err := st.DeferDelivery(ctx, "q-1", later, "a secondary rate limit"); err != nil {
		t.Fatal(err)
	}
	if d, _ := st.GetDelivery(ctx, "q-1"); d.Attempts != 1 || !d.NotBefore.Equal(later) || d.Result != "a secondary rate limit" {
		t.Fatalf("after a deferral: %+v; want the attempt given back", d)
	}
	if p, _ := st.PendingDeliveries(ctx, 0); len(p) != 3 || !p[0].NotBefore.Equal(later) {
		t.Fatalf("pending: %+v; want all three, q-1 due later", p)
	}
	for _, f := range []func() error{
		func() error { return st.RetryDelivery(ctx, "nope", due, "") },
		func() error { return st.DeferDelivery(ctx, "nope", due, "") },
	} {
		if err := f(); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("postponing a missing delivery: %v", err)
		}
	}

	// Replays.
	if _, err := st.ReplayDelivery(ctx, "q-1"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("replaying a pending delivery: %v, want ErrConflict", err)
	}
	if _, err := st.ReplayDelivery(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("replaying a missing delivery: %v", err)
	}
	if err := st.FinishDelivery(ctx, "q-1", store.DeliveryFailed, "not installed"); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishDelivery(ctx, "q-2", store.DeliveryDone, "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReplayDelivery(ctx, "q-2"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("replaying a done delivery: %v, want ErrConflict", err)
	}
	var wg sync.WaitGroup
	var won, lost atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch _, err := st.ReplayDelivery(ctx, "q-1"); {
			case err == nil:
				won.Add(1)
			case errors.Is(err, store.ErrConflict):
				lost.Add(1)
			default:
				t.Errorf("a concurrent replay: %v", err)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 || lost.Load() != 7 {
		t.Fatalf("8 concurrent replays: %d won, %d conflicts; want 1 and 7", won.Load(), lost.Load())
	}
	d, err = st.GetDelivery(ctx, "q-1")
	if err != nil || d.State != store.DeliveryPending || d.Attempts != 0 || !d.NotBefore.IsZero() || !d.DoneAt.IsZero() || d.Replays != 1 ||
		d.Result != "replayed; it had failed: not installed" {
		t.Fatalf("the replayed delivery: %+v, %v", d, err)
	}

	// Listing.
	all, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
	if err != nil || len(all) != 3 || all[0].ID != "q-3" || all[2].ID != "q-1" || string(all[0].Payload) != `{}` {
		t.Fatalf("list: %v, %v; want q-3, q-2, q-1", ids(all), err)
	}
	if done, _ := st.ListDeliveries(ctx, store.DeliveryFilter{State: store.DeliveryDone}); len(done) != 1 || done[0].ID != "q-2" {
		t.Errorf("done ones: %v", ids(done))
	}
	if one, _ := st.ListDeliveries(ctx, store.DeliveryFilter{Limit: 1}); len(one) != 1 || one[0].ID != "q-3" {
		t.Errorf("limit 1: %v", ids(one))
	}
}

func ids(ds []*store.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

// testGitHubMarks: a mark is listed until it ends; a later one replaces
// an earlier one, never the other way; one is deleted; scopes are apart.
func testGitHubMarks(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	put := func(m store.GitHubMark) {
		t.Helper()
		if err := st.PutGitHubMark(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	put(store.GitHubMark{Scope: "installation:1", Kind: "secondary", Until: now.Add(time.Minute), Note: "first"})
	put(store.GitHubMark{Scope: "installation:1", Kind: "secondary", Until: now.Add(30 * time.Second), Note: "shorter"})
	put(store.GitHubMark{Scope: "installation:1", Kind: "core", Until: now.Add(-time.Second), Note: "ended"})
	put(store.GitHubMark{Scope: "installation:2", Kind: "suspended", Until: now.Add(time.Hour)})
	ms, err := st.GitHubMarks(ctx, "installation:1")
	if err != nil || len(ms) != 1 || ms[0].Kind != "secondary" || !ms[0].Until.Equal(now.Add(time.Minute)) || ms[0].Note != "first" {
		t.Fatalf("marks: %+v, %v; want the first secondary only", ms, err)
	}
	put(store.GitHubMark{Scope: "installation:1", Kind: "secondary", Until: now.Add(2 * time.Minute), Note: "longer"})
	if ms, _ := st.GitHubMarks(ctx, "installation:1"); len(ms) != 1 || ms[0].Note != "longer" {
		t.Fatalf("after a later one: %+v", ms)
	}
	if err := st.DeleteGitHubMark(ctx, "installation:2", "suspended"); err != nil {
		t.Fatal(err)
	}
	if ms, _ := st.GitHubMarks(ctx, "installation:2"); len(ms) != 0 {
		t.Errorf("a deleted mark: %+v", ms)
	}
	if err := st.DeleteGitHubMark(ctx, "installation:9", "core"); err != nil {
		t.Errorf("deleting a mark that is not there: %v", err)
	}
	if err := st.PutGitHubMark(ctx, store.GitHubMark{Kind: "core", Until: now}); err == nil {
		t.Error("a mark without a scope was stored")
	}
}
