package storetest

import (
	"context"
	"errors"
	"testing"

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
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v (want the done one only)", n, err)
	}
	if _, err := st.GetDelivery(ctx, d2.ID); err != nil {
		t.Fatalf("the pending delivery was pruned: %v", err)
	}
	if _, err := st.GetDelivery(ctx, d1.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the pruned delivery: %v", err)
	}
}
