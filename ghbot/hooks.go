package ghbot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/base/tracing"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Owner is the owner of the sessions webhooks start: no API token's (their
// user is the requester's: people.go).
const Owner = "github"

// Sessions is what the webhook side asks of the session layer (a
// *session.Manager).
type Sessions interface {
	Create(ctx context.Context, owner string, req session.CreateRequest) (*session.View, error)
	SendMessage(ctx context.Context, owner, id string, out session.Outgoing) (*store.Message, error)
	Get(ctx context.Context, owner, id string) (*session.View, error)
	// Cancel cancels a session's running turn ("@harvest stop").
	Cancel(ctx context.Context, owner, id string) error
	// Stop ends a session whose pull request was merged or closed.
	Stop(ctx context.Context, owner, id string, req session.StopRequest) error
}

// HookStore is the part of the store the webhook side uses: the delivery
// queue, and sessions (to find a thread's session and keep its GitHub
// conversation).
type HookStore interface {
	store.Deliveries
	// Branches says which live session holds a branch: the session a
	// pull request's events go to (one branch, one session).
	store.Branches
	GetSession(ctx context.Context, id string) (*store.Session, error)
	// Events and LastSeq read a session's latest events ("@harvest
	// status").
	Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error)
	LastSeq(ctx context.Context, session string) (int64, error)
	ListSessions(ctx context.Context, f store.SessionFilter) ([]*store.Session, error)
	UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (*store.Session, error)
	// MessageByKey finds a message a delivery sent before (its key).
	MessageByKey(ctx context.Context, session, owner, key string) (*store.Message, error)
	// The commenters' users and the audit log (people.go).
	PeopleStore
	// AcquireLock and ReleaseLock claim a delivery while it is processed:
	// several servers (nodes) on one store process the same queue.
	AcquireLock(ctx context.Context, key, holder string, ttl time.Duration) (store.Lock, error)
	ReleaseLock(ctx context.Context, key, holder string) error
}

// deliveryClaim bounds how long a server that died processing a delivery
// holds it: another one takes it up after that. A live one renews its
// claim every third of it.
const deliveryClaim = 30 * time.Second

// HookConfig configures what webhooks start.
type HookConfig struct {
	// Agent and Model of the sessions webhooks start ("": the server's).
	Agent, Model string
	// Label, when set, starts a session on an issue given that label.
	Label string
	// MaxFixAttempts bounds how many failed check suites of a session's
	// pull request are sent to it (default 3; negative: none).
	MaxFixAttempts int
	// Repos, when not empty, are the only repositories ("owner/name" or
	// "owner/*") whose events start or steer sessions; Users, when not
	// empty, the only people who may (besides needing write access).
	Repos, Users []string
	// Retry is the first wait before a delivery whose processing failed is
	// tried again (default 2 s), doubled each time up to a minute;
	// MaxAttempts (default 8) attempts fail it for good.
	Retry       time.Duration
	MaxAttempts int
	// IdleTimeout, when > 0, is how long a session GitHub starts stays
	// idle before it is suspended (default: the server's); the next
	// trigger on its thread resumes it.
	IdleTimeout time.Duration
	// KeepBranches keeps the branch of a session whose pull request was
	// closed without being merged (by default Harvest deletes the
	// branches it made; a branch it adopted, a person's pull request's,
	// is never deleted).
	KeepBranches bool
	// Shared: several servers (nodes) process this store's deliveries,
	// so each claims a delivery before it processes it. A lone server
	// does not: a claim it left when it was killed would hold the
	// delivery up after its restart.
	Shared bool
	// Observer, when set, hears of every delivery received and of every
	// processing attempt (package telemetry counts them).
	Observer Observer
	// DefaultRole is the role of a GitHub account that becomes a user
	// (people.go; default store.RoleMember).
	DefaultRole store.Role
	// Tracer, when set, traces each processing attempt as a span, the
	// root of the trace of the session it starts or of the turn its
	// message causes (session.Config.Tracer continues it).
	Tracer trace.TracerProvider
}

// Observer hears of webhook deliveries: Delivery runs on the goroutine
// that received or processed one, and must return at once. event is the
// X-GitHub-Event header as sent (for a refused delivery, unchecked).
type Observer interface {
	Delivery(event string, r DeliveryResult)
}

// DeliveryResult says what became of a delivery, a closed set.
type DeliveryResult string

// What the receiver answered (ServeHTTP), then what processing did (Run).
const (
	DeliveryAccepted  DeliveryResult = "accepted"  // stored, to be processed: 202
	DeliveryDuplicate DeliveryResult = "duplicate" // a redelivery of one stored before: 202, not processed again
	DeliveryRejected  DeliveryResult = "rejected"  // a bad signature (401) or a malformed delivery (4xx)
	DeliveryUnstored  DeliveryResult = "unstored"  // the store failed: 503
	DeliveryActed     DeliveryResult = "acted"     // processed: a session started, a message sent
	DeliveryIgnored   DeliveryResult = "ignored"   // processed: nothing for Harvest to do
	DeliveryDeclined  DeliveryResult = "declined"  // processed: the sender may not ask (told so in the thread)
	DeliveryDeferred  DeliveryResult = "deferred"  // held back by GitHub's limits: processed once they allow
	DeliveryRetry     DeliveryResult = "retry"     // processing failed; it is tried again
	DeliveryFailed    DeliveryResult = "failed"    // processing failed for good
)

// DeliveryResults lists every DeliveryResult.
var DeliveryResults = []DeliveryResult{DeliveryAccepted, DeliveryDuplicate, DeliveryRejected, DeliveryUnstored,
	DeliveryActed, DeliveryIgnored, DeliveryDeclined, DeliveryDeferred, DeliveryRetry, DeliveryFailed}

func (h *Hooks) observe(event string, r DeliveryResult) {
	if h.cfg.Observer != nil {
		h.cfg.Observer.Delivery(event, r)
	}
}

// outcome classifies what processing a delivery said it did.
func outcome(result string) DeliveryResult {
	switch {
	case strings.HasPrefix(result, "ignored:"):
		return DeliveryIgnored
	case strings.HasPrefix(result, "refused "):
		return DeliveryDeclined
	}
	return DeliveryActed
}

// Hooks receives GitHub's webhook deliveries (ServeHTTP) and processes
// them (Run).
//
// # Exactly once
//
// A delivery is stored (keyed by X-GitHub-Delivery) before the 202 that
// acknowledges it, so one GitHub sees acknowledged is never lost, and a
// redelivery of it is recognised and not processed again. Run processes
// stored deliveries oldest first, one at a time, and marks each done
// (servers sharing the store claim a delivery, a store lock, before they
// process it, so two never process one at once);
// after a crash it processes what was left pending. Processing a delivery
// twice (a crash after its effects and before it was marked done) has the
// effects of once: the session it starts has an id derived from the
// delivery (session.DerivedID), so a second Create is a conflict; the
// message it sends carries the delivery as idempotency key; the progress
// comment is found by its marker before one is made; a reaction GitHub
// already has is not made again. The one effect before the attempt is
// recorded is a comment's 👀 (ack.go), given as soon as the delivery is
// stored, and idempotent like every reaction.
//
//	POST /v1/github/webhook ─► signature (401) ─► AddDelivery (dup: 200) ─► 202
//	                                                    │ wake, and a comment handed to runAcks (👀)
//	Run: PendingDeliveries ─► BeginDelivery ─► process ─► FinishDelivery(done|failed)
//
// # Goroutines
//
// Run is one goroutine, the caller's; it returns when ctx ends, after the
// goroutines it starts (RunMirrors, runAcks). ServeHTTP runs on the
// server's goroutines; it only wakes Run and hands runAcks what it stored.
type Hooks struct {
	svc      *Service
	st       HookStore
	sessions Sessions
	cfg      HookConfig
	log      *slog.Logger
	now      func() time.Time

	wake chan struct{}
	// arrived hands deliveries just stored to the acknowledger (ack.go).
	arrived chan *store.Delivery
	// holder names this process in the deliveries' claims.
	holder string

	mu        sync.Mutex
	notBefore map[string]time.Time // a failed delivery's next attempt
	perms     map[string]permEntry // repo\x00login → GitHub's answer (commands.go)
	acks      map[string]*ackState // delivery → its acknowledgement (ack.go)
}

// NewHooks makes the webhook side of svc.
func NewHooks(svc *Service, st HookStore, sessions Sessions, cfg HookConfig) *Hooks {
	if cfg.MaxFixAttempts == 0 {
		cfg.MaxFixAttempts = 3
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 2 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	svc.deliveries = st // to tell what asked for a turn (notify.go)
	return &Hooks{svc: svc, st: st, sessions: sessions, cfg: cfg, log: svc.log, now: svc.cfg.Now,
		wake: make(chan struct{}, 1), arrived: make(chan *store.Delivery, ackQueue), notBefore: map[string]time.Time{},
		perms: map[string]permEntry{}, acks: map[string]*ackState{}, holder: newHolder()}
}

// ServeHTTP receives a delivery: 401 for a bad signature, 400 for a
// malformed one (413 too large, 415 not JSON), 202 once it is stored and
// for one stored before (a redelivery: the body says so; it is not
// processed again), 503 when it cannot be stored (GitHub does not retry
// by itself: the operator redelivers it from the app's settings).
func (h *Hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST GitHub webhook deliveries here", http.StatusMethodNotAllowed)
		return
	}
	d, err := gh.ReadDelivery(r, h.svc.gh.WebhookSecret())
	if err != nil {
		h.observe(r.Header.Get("X-GitHub-Event"), DeliveryRejected)
	}
	if errors.Is(err, gh.ErrSignature) {
		h.log.Warn("refused a webhook delivery with a bad signature", "delivery", r.Header.Get("X-GitHub-Delivery"), "remote", r.RemoteAddr)
		http.Error(w, "bad signature: "+err.Error(), http.StatusUnauthorized)
		return
	}
	switch {
	case errors.Is(err, gh.ErrTooLarge):
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	case errors.Is(err, gh.ErrContentType):
		http.Error(w, err.Error(), http.StatusUnsupportedMediaType)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sd := &store.Delivery{ID: d.ID, Event: d.Event, Payload: d.Payload}
	if why := h.ignorable(d.Event, d.Payload); why != "" {
		// Nothing to do: stored done, never queued (ignore.go).
		sd.State, sd.Result = store.DeliveryDone, why
	}
	err = h.st.AddDelivery(r.Context(), sd)
	switch {
	case errors.Is(err, store.ErrConflict):
		// Accepted as the first time was; only one is processed.
		h.observe(d.Event, DeliveryDuplicate)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "delivery %s was received before; not processed again\n", d.ID)
		return
	case err != nil:
		h.observe(d.Event, DeliveryUnstored)
		h.log.Error("storing a webhook delivery", "delivery", d.ID, "err", err)
		http.Error(w, "the delivery could not be stored; redeliver it", http.StatusServiceUnavailable)
		return
	}
	h.observe(d.Event, DeliveryAccepted)
	if sd.State == store.DeliveryDone {
		h.log.Info("webhook delivery processed", "delivery", d.ID, "event", d.Event, "result", sd.Result)
		h.observe(d.Event, DeliveryIgnored)
	} else {
		h.queueAck(sd)
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "delivery %s accepted\n", d.ID)
}

// Run processes deliveries until ctx ends: those left pending by a
// previous run first, then each as it arrives. It keeps the mirrors fresh
// meanwhile (Service.RunMirrors) and acknowledges comments as they are
// stored (runAcks, ack.go): goroutines it waits for.
func (h *Hooks) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		h.svc.RunMirrors(ctx, h.liveRepos)
	}()
	go func() {
		defer wg.Done()
		h.runAcks(ctx)
	}()
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := h.drain(ctx)
		if ctx.Err() != nil {
			return
		}
		if !next.IsZero() {
			timer.Reset(max(next.Sub(h.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-timer.C:
		}
	}
}

// drain processes every pending delivery that is due; it returns when the
// next one not yet due is (zero: none waits).
func (h *Hooks) drain(ctx context.Context) time.Time {
	var next time.Time
	for ctx.Err() == nil {
		ds, err := h.st.PendingDeliveries(ctx, 0)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Error("reading pending webhook deliveries", "err", err)
			}
			return h.now().Add(h.cfg.Retry)
		}
		did := false
		next = time.Time{}
		for _, d := range ds {
			// Due when the store says (a retry's or a limit's time) and
			// when this process put it off (another node's claim).
			h.mu.Lock()
			nb := h.notBefore[d.ID]
			h.mu.Unlock()
			if d.NotBefore.After(nb) {
				nb = d.NotBefore
			}
			if h.now().Before(nb) {
				if next.IsZero() || nb.Before(next) {
					next = nb
				}
				continue
			}
			h.processOne(ctx, d.ID)
			did = true
			break // re-read: processing may take a while, deliveries arrive
		}
		if !did {
			return next
		}
	}
	return next
}

// processOne runs a delivery's attempt and records its end.
func (h *Hooks) processOne(ctx context.Context, id string) {
	// Claimed first: two servers sharing the store never process one
	// delivery at once (its effects are idempotent, but two progress
	// comments posted in the same instant would both be made). The server
	// that received it claims it at once, as it always did: another one
	// reading the queue meanwhile finds it taken.
	if h.cfg.Shared {
		release, ok := h.claim(ctx, id)
		if !ok {
			return
		}
		defer release()
	}
	// Its acknowledgement, if under way, ends before the attempt begins
	// (ack.go): the two never ask GitHub at once, and the 👀 does not
	// share the machine with the attempt's write.
	h.acked(ctx, id)
	h.processClaimed(ctx, id)
}

// claim takes the delivery's claim, renewed until release; false: another
// server holds it (it is put off here).
func (h *Hooks) claim(ctx context.Context, id string) (release func(), ok bool) {
	key := "delivery:" + id
	if _, err := h.st.AcquireLock(ctx, key, h.holder, deliveryClaim); err != nil {
		if !errors.Is(err, store.ErrLocked) && ctx.Err() == nil {
			h.log.Error("claiming a webhook delivery", "delivery", id, "err", err)
		}
		// Another server processes it (or the store failed): look again
		// later, after the others.
		h.mu.Lock()
		h.notBefore[id] = h.now().Add(h.cfg.Retry)
		h.mu.Unlock()
		return nil, false
	}
	rctx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(deliveryClaim / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if _, err := h.st.AcquireLock(rctx, key, h.holder, deliveryClaim); err != nil && rctx.Err() == nil {
					h.log.Warn("renewing the claim of a webhook delivery", "delivery", id, "err", err)
				}
			}
		}
	}()
	return func() {
		stop()
		<-renewed
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := h.st.ReleaseLock(fctx, key, h.holder); err != nil {
			h.log.Warn("releasing the claim of a webhook delivery (it runs out by itself)", "delivery", id, "err", err)
		}
	}, true
}

// processClaimed runs a delivery's attempt and records its end
// (finish, deliveries.go).
func (h *Hooks) processClaimed(ctx context.Context, id string) {
	d, err := h.st.BeginDelivery(ctx, id)
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && ctx.Err() == nil {
			h.log.Error("starting a webhook delivery", "delivery", id, "err", err)
		}
		return
	}
	h.mu.Lock()
	delete(h.notBefore, id)
	h.mu.Unlock()
	defer h.forgetAck(id)
	if why := h.suspended(ctx, d); why != "" {
		h.finish(ctx, d, why, nil)
		return
	}
	// A delivery never waits for one of GitHub's windows (the queue would
	// wait with it): it is put off until the window ends (finish).
	pctx, cancel := context.WithTimeout(gh.NoWait(ctx), processTimeout)
	pctx, span := h.span(pctx, d)
	result, err := h.process(pctx, d)
	tracing.End(span, err)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: pending, processed again at the next start
	}
	h.finish(ctx, d, result, err)
}

// span starts the span of one processing attempt of d: the root of a
// new trace (GitHub sends no trace context), or nothing without a Tracer.
func (h *Hooks) span(ctx context.Context, d *store.Delivery) (context.Context, trace.Span) {
	if h.cfg.Tracer == nil {
		return ctx, trace.SpanFromContext(context.Background()) // records nothing
	}
	return h.cfg.Tracer.Tracer("github.com/harvest-dev/harvest/ghbot").Start(ctx, "github.delivery "+d.Event,
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("github.event", d.Event), attribute.String("github.delivery", d.ID),
			attribute.Int("harvest.attempt", d.Attempts)))
}

// processTimeout bounds one attempt at a delivery: every call to GitHub
// and the session layer it makes.
const processTimeout = 5 * time.Minute

// permanent is an error no retry can fix (a payload that does not parse).
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// isPermanent: no retry changes the outcome: a payload that does not
// parse, a request the session layer refuses, GitHub refusing (no access,
// not installed, suspended, invalid).
func isPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p) || session.IsInput(err) || gh.Permanent(err)
}

// liveStates are the states of sessions whose repositories' mirrors are
// kept fresh: every one not ended (a suspended one may resume).
var liveStates = []store.State{store.StatePending, store.StateProvisioning, store.StateIdle, store.StateWorking,
	store.StateWaiting, store.StateCancelling, store.StateSuspended}

// liveRepos lists the GitHub repositories of sessions not ended.
func (h *Hooks) liveRepos(ctx context.Context) ([]string, error) {
	ss, err := h.st.ListSessions(ctx, store.SessionFilter{States: liveStates})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range ss {
		for _, r := range s.Repos {
			if r.GitHub != "" {
				out = append(out, r.GitHub)
			}
		}
	}
	return out, nil
}

// newHolder names a process in the deliveries' claims.
func newHolder() string {
	var b [8]byte
	rand.Read(b[:])
	host, _ := os.Hostname()
	return "ghbot:" + host + ":" + hex.EncodeToString(b[:])
}
