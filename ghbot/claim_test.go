package ghbot

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestDeliveryClaim: a delivery another server (node) has claimed is not
// processed here, not even counted as an attempt; once the claim is
// released it is.
func TestDeliveryClaim(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// An event Harvest does not act on: processing it marks it done.
	if err := st.AddDelivery(ctx, &store.Delivery{ID: "d1", Event: "x-nothing", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	h := &Hooks{st: st, cfg: HookConfig{Retry: time.Second, MaxAttempts: 3, Shared: true}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		now: time.Now, wake: make(chan struct{}, 1), notBefore: map[string]time.Time{}, holder: newHolder()}
	if _, err := st.AcquireLock(ctx, "delivery:d1", "ghbot:other-node", time.Hour); err != nil {
		t.Fatal(err)
	}
	h.processOne(ctx, "d1")
	d, err := st.GetDelivery(ctx, "d1")
	if err != nil || d.State != store.DeliveryPending || d.Attempts != 0 {
		t.Fatalf("a delivery claimed elsewhere, after processOne: %+v %v; want it pending, no attempt", d, err)
	}
	if nb := h.notBefore["d1"]; !nb.After(time.Now()) {
		t.Errorf("the claimed delivery is not put off (notBefore %v): drain would spin on it", nb)
	}
	if err := st.ReleaseLock(ctx, "delivery:d1", "ghbot:other-node"); err != nil {
		t.Fatal(err)
	}
	h.processOne(ctx, "d1")
	if d, err := st.GetDelivery(ctx, "d1"); err != nil || d.State != store.DeliveryDone || d.Attempts != 1 {
		t.Fatalf("after the claim is released: %+v %v; want it done in one attempt", d, err)
	}
	if _, err := st.GetLock(ctx, "delivery:d1"); err == nil {
		t.Error("the delivery's claim is still held after it was processed")
	}
}
