package slackbot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Owner is the owner of the sessions Slack starts: no API token's (their
// user is the person who asked: people.go).
const Owner = "slack"

// Sessions is what the Slack side asks of the session layer (a
// *session.Manager).
type Sessions interface {
	Create(ctx context.Context, owner string, req session.CreateRequest) (*session.View, error)
	SendMessage(ctx context.Context, owner, id string, out session.Outgoing) (*store.Message, error)
	Get(ctx context.Context, owner, id string) (*session.View, error)
	// Cancel cancels a session's running turn (Stop, /harvest stop).
	Cancel(ctx context.Context, owner, id string) error
	// Subscribe follows a session's events (the thread's progress).
	Subscribe(ctx context.Context, owner, id string, after int64) (*journal.Subscription, error)
}

// Store is the part of the store the Slack side uses.
type Store interface {
	store.Slack
	GetSession(ctx context.Context, id string) (*store.Session, error)
	// Messages: which Slack message sent a session's message (its key).
	Messages(ctx context.Context, session string, states ...store.MessageState) ([]*store.Message, error)
	ListSessions(ctx context.Context, f store.SessionFilter) ([]*store.Session, error)
	// Leases: which node watches a session's thread (nodes.go).
	GetLease(ctx context.Context, session string) (store.Lease, error)
	NodeLeases(ctx context.Context, node string) ([]store.Lease, error)
	// People: Slack accounts are users (people.go).
	UserByIdentity(ctx context.Context, kind, issuer, subject string) (*store.User, error)
	AddIdentity(ctx context.Context, i *store.Identity) error
	ListUsers(ctx context.Context) ([]*store.User, error)
	GetUser(ctx context.Context, id string) (*store.User, error)
	Identities(ctx context.Context, user string) ([]*store.Identity, error)
	AppendAudit(ctx context.Context, e *store.AuditEntry) error
	Claims // one server handles an event (inbox.go)
}

// Config configures the Slack app.
type Config struct {
	// API is the Web API client with the bot token (xoxb-), and, for
	// Socket Mode, the app-level token (slack.OptionAppLevelToken).
	API *slack.Client
	// SocketMode receives events over Socket Mode (Run); otherwise they
	// come to ServeHTTP, checked with SigningSecret.
	SocketMode bool
	// Connections is how many Socket Mode connections the app keeps
	// (1 to 10, Slack's limit an app; default 1).
	Connections   int
	SigningSecret string
	Store         Store
	Sessions      Sessions
	// Access decides who may start and steer a session on a repository.
	Access *authz.Resolver
	// RepoRoots are the directories whose subdirectories a message may
	// name by their name; GitHub says "owner/name" names a GitHub
	// repository (the server has one).
	RepoRoots []string
	GitHub    bool
	// Installed lists the repositories ("owner/name", sorted) the GitHub
	// App's installations cover, and whether the list is cut (nil: no
	// App): the picker offers those the person may use.
	Installed func(ctx context.Context) (repos []string, cut bool, err error)
	// PublicURL is where people reach Harvest (the Open in Harvest
	// button; "": no button).
	PublicURL string
	// Agent and Model of the sessions Slack starts ("": the server's).
	Agent, Model string
	// UpdateEvery is the least time between two edits of a channel's
	// messages (default 1 s: chat.update's limit).
	UpdateEvery time.Duration
	Logger      *slog.Logger
	// Node is this node's id with several nodes on one store (harvest
	// serve --node-id; "": one node), and NodeEvery how often it looks
	// for the sessions whose threads it watches (nodes.go; default 1 s).
	Node      string
	NodeEvery time.Duration
}

// Bot is Harvest's Slack app.
type Bot struct {
	cfg  Config
	api  *slack.Client
	st   Store
	log  *slog.Logger
	rate *rate

	// Learned by auth.test (Start).
	team, botUser, botID string

	ctx    context.Context // the Bot's: ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // event handlers, watchers, the socket loop

	mu       sync.Mutex
	closed   bool
	threads  map[string]*threadLock // thread key → held while one of its events is handled
	watching map[string]*watch      // session → its thread's watcher
	users    map[string]cachedUser  // Slack user → Harvest user, for a while
	updated  map[string]time.Time   // session → its last slack_update (mcp.go)
	noted    map[string]bool        // thread/person told how to link (start.go firstNote)

	in inbox // the events handled now (inbox.go)
}

// New checks the token (auth.test) and returns the app; Start begins its
// work.
func New(ctx context.Context, cfg Config) (*Bot, error) {
	if cfg.API == nil || cfg.Store == nil || cfg.Sessions == nil || cfg.Access == nil {
		return nil, errors.New("slackbot: Config needs API, Store, Sessions and Access")
	}
	if !cfg.SocketMode && cfg.SigningSecret == "" {
		return nil, errors.New("slackbot: give an app-level token (Socket Mode) or a signing secret (HTTP events)")
	}
	if cfg.Connections == 0 {
		cfg.Connections = 1
	}
	if cfg.Connections < 1 || cfg.Connections > 10 {
		return nil, fmt.Errorf("slackbot: %d Socket Mode connections: give 1 to 10 (Slack allows 10 an app)", cfg.Connections)
	}
	if cfg.UpdateEvery <= 0 {
		cfg.UpdateEvery = time.Second
	}
	if cfg.NodeEvery <= 0 {
		cfg.NodeEvery = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	auth, err := cfg.API.AuthTestContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("slack: auth.test with the bot token: %w (check --slack-bot-token-file and --slack-api-url)", err)
	}
	b := &Bot{cfg: cfg, api: cfg.API, st: cfg.Store, log: cfg.Logger.With("component", "slack"),
		team: auth.TeamID, botUser: auth.UserID, botID: auth.BotID,
		threads: map[string]*threadLock{}, watching: map[string]*watch{}, users: map[string]cachedUser{}, updated: map[string]time.Time{}}
	b.rate = newRate(cfg.UpdateEvery)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Start watches the threads of the live sessions Slack started (after a
// restart), prunes old event ids, and, in Socket Mode, connects.
func (b *Bot) Start() error {
	if b.cfg.Node != "" {
		// Several nodes: the watchers of this node's sessions only, now
		// and as leases move (nodes.go).
		if err := b.placeOnce(b.ctx); err != nil {
			return fmt.Errorf("slack: finding the sessions this node watches: %w", err)
		}
		b.goFn(b.placeWatchers)
	} else {
		ss, err := b.st.ListSessions(b.ctx, store.SessionFilter{Owner: Owner, States: liveStates})
		if err != nil {
			return fmt.Errorf("slack: listing the sessions Slack started: %w", err)
		}
		for _, s := range ss {
			th, err := b.st.SlackThread(b.ctx, s.ID)
			if err != nil {
				b.log.Warn("a Slack session without its thread", "session", s.ID, "err", err)
				continue
			}
			b.watchSession(th, th.Shown) // what the thread does not show yet
		}
	}
	b.goFn(b.prune)
	b.goFn(b.resume) // the events a stop cut short (inbox.go)
	if b.cfg.SocketMode {
		for n := range b.cfg.Connections {
			b.goFn(func() { b.runSocket(n + 1) })
		}
	}
	return nil
}

// Close stops the app and waits for its goroutines.
func (b *Bot) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}

// goFn runs f in a goroutine the Bot owns (Close waits for it); none
// after Close.
func (b *Bot) goFn(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() { defer b.wg.Done(); f() }()
	return true
}

// prune forgets event ids older than an hour, hourly: Slack's last retry
// comes within minutes.
func (b *Bot) prune() {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if _, err := b.st.PruneSlackEvents(b.ctx, time.Now().Add(-time.Hour)); err != nil && b.ctx.Err() == nil {
			b.log.Warn("pruning Slack event ids", "err", err)
		}
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// threadKey names a thread: a session's id derives from it.
func (b *Bot) threadKey(channel, ts string) string { return b.team + "/" + channel + "/" + ts }

// sessionID is the id of the session of a thread.
func (b *Bot) sessionID(channel, ts string) string {
	return session.DerivedID("slack\x00" + b.threadKey(channel, ts))
}

// threadLock is a thread's lock, with how many hold or wait for it.
type threadLock struct {
	mu sync.Mutex
	n  int
}

// lockThread serializes the handling of one thread's events; the
// function it returns unlocks (and forgets a lock nobody waits for).
func (b *Bot) lockThread(key string) func() {
	b.mu.Lock()
	l := b.threads[key]
	if l == nil {
		l = &threadLock{}
		b.threads[key] = l
	}
	l.n++
	b.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		b.mu.Lock()
		if l.n--; l.n == 0 {
			delete(b.threads, key)
		}
		b.mu.Unlock()
	}
}

// stripMentions removes "<@U…>" mentions of the bot from a message.
func (b *Bot) stripMentions(text string) string {
	return strings.TrimSpace(strings.ReplaceAll(text, "<@"+b.botUser+">", ""))
}
