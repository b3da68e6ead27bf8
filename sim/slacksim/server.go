package slacksim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Clock tells the time and wakes waiters: the rate limits' windows, the
// 3-second ack deadline, the retry backoff and a disconnect's grace all
// run on it, so a test moves time instead of sleeping.
// stacktest.Clock satisfies it.
type Clock interface {
	Now() time.Time
	// At returns a channel that gets the time once the clock reaches t,
	// and a function that releases the timer.
	At(t time.Time) (<-chan time.Time, func())
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) At(t time.Time) (<-chan time.Time, func()) {
	tm := time.NewTimer(time.Until(t))
	return tm.C, func() { tm.Stop() }
}

// Options configure a stand-in. The zero value listens on 127.0.0.1:0,
// runs on the wall clock and delivers events over Socket Mode.
type Options struct {
	// Listen is the address to listen on (default 127.0.0.1:0).
	Listen string
	// Clock is the time source (default: the wall clock).
	Clock Clock
	// Logger logs each request (default: discard).
	Logger *slog.Logger
	// TeamDomain is the workspace's domain (default "harvest-sim"):
	// auth.test's url and permalinks are https://DOMAIN.slack.com/...
	TeamDomain string
	// BotName is the bot user's name (default "harvest").
	BotName string
	// AckTimeout is how long an envelope may wait for its ack, or an
	// HTTP delivery for its 200 (default 3 s, as Slack).
	AckTimeout time.Duration
	// RetryBackoff are the waits before each redelivery after a miss
	// (default: 0, 1 min, 5 min: Slack's three retries).
	RetryBackoff []time.Duration
	// PingInterval is how often each Socket Mode connection is pinged
	// (WebSocket ping, wall clock; default 10 s): Slack's clients treat
	// a server silent for 30 s as gone and reconnect. A connection that
	// does not answer a ping within the interval is closed.
	PingInterval time.Duration
	// RequestURL, when set, turns Socket Mode off: events, interactions
	// and slash commands are POSTed there, signed with SigningSecret.
	RequestURL string
	// InteractivityURL and CommandURL, when set with RequestURL, receive
	// clicks and slash commands instead of it (on Slack each is its own
	// setting: the Interactivity Request URL, each command's URL).
	InteractivityURL string
	CommandURL       string
	// SigningSecret signs HTTP deliveries (default: generated).
	SigningSecret string
	// Limits override the rate limit of some methods (see Limit).
	Limits map[string]Limit
}

// Server is a running stand-in. Its methods are safe for concurrent use.
type Server struct {
	opts   Options
	clock  Clock
	logger *slog.Logger
	ln     net.Listener
	http   *http.Server
	url    string

	ctx    context.Context // ends at Close: handler contexts, deliveries
	cancel context.CancelFunc
	wg     sync.WaitGroup // the HTTP server, the dispatcher, deliveries, sockets
	kick   chan struct{}  // wakes the dispatcher
	client *http.Client   // HTTP deliveries; its idle connections closed by Close

	mu     sync.Mutex // guards everything below
	closed bool
	st     state
}

// Start listens and serves until Close.
func Start(opts Options) (*Server, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Clock == nil {
		opts.Clock = wallClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.TeamDomain == "" {
		opts.TeamDomain = "harvest-sim"
	}
	if opts.BotName == "" {
		opts.BotName = "harvest"
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = 3 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 10 * time.Second
	}
	if opts.RetryBackoff == nil {
		opts.RetryBackoff = []time.Duration{0, time.Minute, 5 * time.Minute}
	}
	if opts.SigningSecret == "" {
		opts.SigningSecret = randHex(16)
	}
	if opts.RequestURL == "" && (opts.InteractivityURL != "" || opts.CommandURL != "") {
		return nil, errors.New("Options.InteractivityURL and CommandURL need RequestURL (Socket Mode carries all three)")
	}
	for m, l := range opts.Limits {
		if err := l.check(m); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:   opts,
		clock:  opts.Clock,
		logger: opts.Logger,
		ln:     ln,
		url:    "http://" + ln.Addr().String(),
		kick:   make(chan struct{}, 1),
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.st = newState(opts, s.clock.Now())
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.serveAPI)
	mux.HandleFunc("GET /link/", s.serveSocket)
	mux.HandleFunc("POST /response/{id}", s.serveResponseURL)
	mux.HandleFunc("/_sim/slack/", s.serveControl)
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("serving", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.dispatch()
	}()
	return s, nil
}

// URL is the server's base URL, http://127.0.0.1:PORT. The Web API is at
// URL()+"/api/" (slack.OptionAPIURL, Bolt's clientOptions.slackApiUrl).
func (s *Server) URL() string { return s.url }

// APIURL is URL()+"/api/".
func (s *Server) APIURL() string { return s.url + "/api/" }

// Close ends every connection and delivery and waits for the goroutines.
// It may be called more than once.
func (s *Server) Close() error {
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.http.Shutdown(ctx)
	s.mu.Lock()
	s.closed = true
	for _, c := range s.st.conns {
		c.ws.CloseNow()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.client.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Tokens are the app's credentials.
type Tokens struct {
	Bot           string `json:"bot_token"`      // xoxb-: the Web API
	App           string `json:"app_token"`      // xapp-: apps.connections.open
	SigningSecret string `json:"signing_secret"` // signs HTTP deliveries
	TeamID        string `json:"team_id"`
	AppID         string `json:"app_id"`
	BotUserID     string `json:"bot_user_id"`
	BotID         string `json:"bot_id"`
}

// Tokens returns the app's credentials and identifiers.
func (s *Server) Tokens() Tokens {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Tokens{Bot: s.st.botToken, App: s.st.appToken, SigningSecret: s.opts.SigningSecret,
		TeamID: teamID, AppID: appID, BotUserID: s.st.botUser, BotID: botID}
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// bearer is the token of a request: Authorization: Bearer, else the
// token parameter (form or query), as Slack accepts both.
func bearer(r *http.Request, params map[string]any) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
		return ""
	}
	if t, ok := params["token"].(string); ok {
		return t
	}
	return ""
}
