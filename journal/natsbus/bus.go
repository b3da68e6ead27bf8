package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// SubjectPrefix starts the subject of every session's events:
// harvest.events.<session>.
const SubjectPrefix = "harvest.events."

// Config tunes a Bus; zero values take the defaults.
type Config struct {
	// URL of the NATS server (nats://host:4222; a comma-separated list of
	// a cluster's servers also works). Required.
	URL string
	// Stream is the JetStream stream's name (default HARVEST_EVENTS).
	Stream string
	// Duplicates is the stream's de-duplication window (default 2m): a
	// Nats-Msg-Id seen within it is stored once.
	Duplicates time.Duration
	// MaxAge and MaxBytes bound what the stream keeps (default 24h and
	// 1 GiB); the oldest messages go first. A follower behind by more than
	// that reads the rest from the store.
	MaxAge   time.Duration
	MaxBytes int64
	// QueueSize bounds the events waiting to be published (default 65536);
	// past it, the oldest are dropped (followers heal from the store).
	QueueSize int
	// PublishTimeout bounds the wait for a publish's ack (default 5s).
	PublishTimeout time.Duration
	// ConnectTimeout bounds the first connection (default 5s).
	ConnectTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between failed publishes and
	// between attempts to recreate a consumer (default 50ms and 2s).
	RetryMin, RetryMax time.Duration
	// HealEvery: a follower that hears nothing from NATS for this long
	// reads the store for events it missed (default 2s).
	HealEvery time.Duration
	// PollDown: while the connection to NATS is lost, a follower reads
	// the store this often instead (default 500ms; at most HealEvery),
	// starting at once when the connection drops.
	PollDown time.Duration
	// Page is how many events a follower reads from the store at once
	// (default 256).
	Page   int
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Stream == "" {
		c.Stream = "HARVEST_EVENTS"
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	dur(&c.Duplicates, 2*time.Minute)
	dur(&c.MaxAge, 24*time.Hour)
	dur(&c.PublishTimeout, 5*time.Second)
	dur(&c.ConnectTimeout, 5*time.Second)
	dur(&c.RetryMin, 50*time.Millisecond)
	dur(&c.RetryMax, 2*time.Second)
	dur(&c.HealEvery, 2*time.Second)
	dur(&c.PollDown, 500*time.Millisecond)
	c.PollDown = min(c.PollDown, c.HealEvery)
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 1 << 30
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 65536
	}
	if c.Page <= 0 {
		c.Page = 256
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Bus publishes committed events (it is a journal.Publisher) and follows
// sessions (Follow). See the package doc.
type Bus struct {
	cfg Config
	st  store.EventStore
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream
	url string // redacted, for messages

	// pubCtx ends publishing: cancelled by Close once the queue is
	// drained or Close's context ended. followCtx ends every Follower.
	pubCtx, followCtx      context.Context
	stopPub, stopFollowers context.CancelFunc

	mu        sync.Mutex
	queue     []event.Event
	inflight  int // taken from the queue by the publisher, not yet acked or given up
	closing   bool
	dropped   int64 // events dropped from a full queue
	overflow  bool  // the queue is full: logged once per episode
	wake      chan struct{}
	published int64 // events acknowledged by JetStream (duplicates too)
	failed    int64 // events given up on (cannot be published at all)

	pubDone   chan struct{}
	followers sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	// connMu guards lost: closed when the connection to NATS is lost,
	// replaced by an open one when it is back (connState).
	connMu sync.Mutex
	lost   chan struct{}
}

var _ journal.Publisher = (*Bus)(nil)

// CheckURL says whether s is a NATS URL Connect can use (nats://, tls://,
// ws:// or wss://, with a host), or a comma-separated list of them.
func CheckURL(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("no NATS URL: give one like nats://127.0.0.1:4222")
	}
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("NATS URL %q: %w", redact(part), err)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("NATS URL %s: the scheme must be nats://, tls://, ws:// or wss://, like nats://127.0.0.1:4222", redact(part))
		}
		if u.Host == "" {
			return fmt.Errorf("NATS URL %s: no host, give one like nats://127.0.0.1:4222", redact(part))
		}
	}
	return nil
}

// redact hides the password of a URL (or of each in a list).
func redact(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil {
			if u.User != nil {
				u.User = url.User("xxxxx")
			}
			parts[i] = u.Redacted()
		} else {
			parts[i] = "(unparsable URL)"
		}
	}
	return strings.Join(parts, ",")
}

// Connect connects to NATS at cfg.URL, creates or updates the stream, and
// starts publishing. st is the store the journal writes (followers read it
// to catch up and heal). Close it to flush and stop.
func Connect(ctx context.Context, st store.EventStore, cfg Config) (*Bus, error) {
	cfg.defaults()
	if err := CheckURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("natsbus: %w", err)
	}
	b := &Bus{cfg: cfg, st: st, url: redact(cfg.URL), wake: make(chan struct{}, 1), pubDone: make(chan struct{}), lost: make(chan struct{})}
	b.log = cfg.Logger.With("component", "natsbus", "nats", b.url)
	timeout := cfg.ConnectTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	nc, err := nats.Connect(cfg.URL,
		nats.Name("harvest"),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1), // never give up: publishing retries, followers heal meanwhile
		nats.ReconnectWait(cfg.RetryMax),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.setConnected(false)
			if err != nil {
				b.log.Warn("disconnected from NATS; reconnecting (events go on being stored, followers read the store)", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			b.setConnected(true)
			b.log.Info("reconnected to NATS")
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("natsbus: connecting to NATS at %s: %w (is nats-server running there, with JetStream on: nats-server -js?)", b.url, err)
	}
	b.nc = nc
	b.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbus: JetStream on NATS at %s: %w", b.url, err)
	}
	if err := b.ensureStream(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	b.pubCtx, b.stopPub = context.WithCancel(context.Background())
	b.followCtx, b.stopFollowers = context.WithCancel(context.Background())
	go b.publishLoop()
	return b, nil
}

// ensureStream creates the stream, or updates it to cfg (idempotent).
func (b *Bus) ensureStream(ctx context.Context) error {
	_, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        b.cfg.Stream,
		Description: "Harvest session events (the store has them all; this is the live path between servers)",
		Subjects:    []string{SubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Duplicates:  b.cfg.Duplicates,
		MaxAge:      b.cfg.MaxAge,
		MaxBytes:    b.cfg.MaxBytes,
	})
	if err != nil {
		hint := ""
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders) {
			hint = " (JetStream is not enabled there: start nats-server with -js)"
		}
		return fmt.Errorf("natsbus: creating or updating the stream %s on NATS at %s: %w%s", b.cfg.Stream, b.url, err, hint)
	}
	return nil
}

// Subject is the NATS subject of a session's events. A session id that is
// not a plain NATS token (letters, digits, - and _) is hex-encoded after a
// ~, which no plain id has, so two sessions never share a subject.
func Subject(session string) string {
	for i := 0; i < len(session); i++ {
		c := session[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Sprintf("%s~%x", SubjectPrefix, session)
		}
	}
	if session == "" {
		return SubjectPrefix + "~"
	}
	return SubjectPrefix + session
}

// Stats counts what the publisher did.
type Stats struct {
	Published int64 // acknowledged by JetStream (a de-duplicated repeat counts)
	Dropped   int64 // dropped from a full queue
	Failed    int64 // given up on: cannot be published at all (too large)
	Queued    int   // waiting now, or being published
	Down      bool  // the connection to NATS is lost now (followers poll the store)
}

// Stats says what the publisher did so far.
func (b *Bus) Stats() Stats {
	down, _ := b.connState()
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Published: b.published, Dropped: b.dropped, Failed: b.failed, Queued: len(b.queue) + b.inflight, Down: down}
}

// Close stops taking events, publishes what is queued until ctx ends (the
// rest is dropped: followers heal from the store), ends every Follower
// with journal.ErrClosed, waits for all the goroutines and closes the
// connection. Close the journal first, so nothing is published after.
func (b *Bus) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.mu.Unlock()
		b.stopFollowers()
		b.signal()
		var errs []error
		select {
		case <-b.pubDone:
		case <-ctx.Done():
			b.stopPub()
			<-b.pubDone
		}
		b.stopPub()
		b.mu.Lock()
		if n := len(b.queue) + b.inflight; n > 0 {
			errs = append(errs, fmt.Errorf("natsbus: closed with %d events not published (%w); followers read them from the store", n, ctx.Err()))
			b.queue = nil
		}
		b.mu.Unlock()
		b.followers.Wait()
		b.nc.Close()
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// setConnected records the connection's state for the followers
// (connState).
func (b *Bus) setConnected(up bool) {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	select {
	case <-b.lost: // down
		if up {
			b.lost = make(chan struct{})
		}
	default: // up
		if !up {
			close(b.lost)
		}
	}
}

// connState says whether the connection to NATS is lost, and while it is
// not, returns a channel closed when it is.
func (b *Bus) connState() (down bool, lost <-chan struct{}) {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	select {
	case <-b.lost:
		return true, nil
	default:
		return false, b.lost
	}
}
