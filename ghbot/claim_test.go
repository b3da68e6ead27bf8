package ghbot

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/harvest-dev/harvest/gh"
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

// deliveries records what an Observer hears.
type deliveries struct {
	mu    sync.Mutex
	heard []string
}

func (d *deliveries) Delivery(event string, r DeliveryResult) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.heard = append(d.heard, event+" "+string(r))
}

// TestDeliveryObserved: processing a delivery is heard by the Observer
// (what it did) and traced as the root span of a trace of its own.
func TestDeliveryObserved(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, d := range []*store.Delivery{
		{ID: "d1", Event: "x-nothing", Payload: []byte(`{}`)},
		{ID: "d2", Event: "issue_comment", Payload: []byte(`{"action": "edited"}`)},
		{ID: "d3", Event: "issues", Payload: []byte(`not json`)},
	} {
		if err := st.AddDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	var heard deliveries
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)
	h := &Hooks{st: st, cfg: HookConfig{Retry: time.Second, MaxAttempts: 3, Observer: &heard, Tracer: tp}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		now: time.Now, wake: make(chan struct{}, 1), notBefore: map[string]time.Time{}, holder: newHolder()}
	for _, id := range []string{"d1", "d2", "d3"} {
		h.processOne(ctx, id)
	}
	want := []string{"x-nothing ignored", "issue_comment ignored", "issues failed"}
	if !slices.Equal(heard.heard, want) {
		t.Errorf("the observer heard %q, want %q", heard.heard, want)
	}
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended, want one per delivery", len(ended))
	}
	for i, s := range ended {
		if s.Parent().IsValid() || s.Name() != "github.delivery "+strings.Fields(want[i])[0] {
			t.Errorf("span %d: %q with parent %v; want a root named for its event", i, s.Name(), s.Parent())
		}
	}
	if ended[2].Status().Code != codes.Error {
		t.Errorf("the failed delivery's span has status %v, want an error", ended[2].Status())
	}

	// An attempt held back by GitHub's limits is deferred; one that
	// failed and may be tried again, a retry.
	heard.heard = nil
	for _, c := range []struct {
		id  string
		err error
	}{
		{"d4", &gh.RateLimitedError{Scope: "app", Kind: gh.KindSecondary, RetryAt: time.Now().Add(time.Minute)}},
		{"d5", errors.New("the store hiccupped")},
	} {
		if err := st.AddDelivery(ctx, &store.Delivery{ID: c.id, Event: "issue_comment", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		d, err := st.BeginDelivery(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		h.finish(ctx, d, "", c.err)
	}
	if want := []string{"issue_comment deferred", "issue_comment retry"}; !slices.Equal(heard.heard, want) {
		t.Errorf("the observer heard %q, want %q", heard.heard, want)
	}
}
