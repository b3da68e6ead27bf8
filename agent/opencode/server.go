package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// server is one running `opencode serve` in the box.
type server struct {
	proc *sandbox.Process
	base string // http://127.0.0.1:PORT, as the box sees it
	out  *outputTail
}

// stopGrace is how long stop waits after SIGTERM before killing the tree.
const stopGrace = 5 * time.Second

func (s *server) alive() bool {
	select {
	case <-s.proc.Done():
		return false
	default:
		return true
	}
}

// stop ends the server: SIGTERM to its process group, then the whole tree
// killed after stopGrace. It returns once the process is gone.
func (s *server) stop(ctx context.Context) error {
	if !s.alive() {
		return nil
	}
	_ = s.proc.Signal(ctx, syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-s.proc.Done():
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.proc.Kill(kctx); err != nil {
		return fmt.Errorf("opencode agent: killing the server: %w", err)
	}
	_, err := s.proc.Wait(kctx)
	return err
}

// exitReason describes how the server ended, with the end of its output.
func (s *server) exitReason() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var how string
	if st, err := s.proc.Wait(ctx); err != nil {
		how = "stopped answering (" + err.Error() + ")"
	} else {
		how = "exited (" + st.String() + ")"
	}
	if tail := s.out.tail(); tail != "" {
		how += "; its last output: " + tail
	}
	return how
}

// server returns the running server, starting it (again) when needed: at
// New, and at the first turn after it crashed or was stopped. The first
// start also checks the server's API and creates the OpenCode session.
func (a *Agent) server(ctx context.Context) (*server, error) {
	a.srvMu.Lock()
	defer a.srvMu.Unlock()
	if a.closed {
		return nil, errors.New("opencode agent: closed")
	}
	if a.fatal != nil {
		return nil, a.fatal
	}
	if a.srv != nil && a.srv.alive() {
		return a.srv, nil
	}
	if a.srv != nil {
		a.log.Warn("restarting the OpenCode server", "previous", a.srv.exitReason())
		a.srv = nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StartTimeout)
	defer cancel()
	s, err := a.start(ctx)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := a.prepare(ctx, s); err != nil {
		_ = s.stop(context.WithoutCancel(ctx))
		var ie *IncompatibleError
		if errors.As(err, &ie) {
			a.fatal = err
		}
		return nil, err
	}
	a.log.Debug("OpenCode session ready", "took", time.Since(began).Round(time.Millisecond))
	a.srv = s
	return s, nil
}

// start starts the server and waits for its address.
func (a *Agent) start(ctx context.Context) (*server, error) {
	began := time.Now()
	out := newOutputTail()
	p, err := a.box.Start(ctx, &sandbox.Cmd{
		Args: []string{a.cfg.CLI, "serve", "--hostname", "127.0.0.1", "--port", "0"},
		Env:  a.env(),
		Dir:  a.cfg.Workdir,
		// stdout and stderr both: the address line comes on stdout, the
		// reasons it failed on either.
		Stdout: out, Stderr: out,
	})
	if err != nil {
		return nil, fmt.Errorf("opencode agent: starting the OpenCode server in the box: %w", err)
	}
	s := &server{proc: p, out: out}
	select {
	case base := <-out.listening:
		u, err := url.Parse(base)
		if err != nil || u.Hostname() != "127.0.0.1" || u.Port() == "" {
			_ = s.stop(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("opencode agent: the OpenCode server says it listens on %q, not on the box's 127.0.0.1", base)
		}
		s.base = "http://" + u.Host
		a.log.Info("OpenCode server started", "addr", u.Host, "pid", p.PID(), "took", time.Since(began).Round(time.Millisecond))
		return s, nil
	case <-p.Done():
		return nil, fmt.Errorf("opencode agent: the OpenCode server %s before it listened", s.exitReason())
	case <-ctx.Done():
		_ = s.stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("opencode agent: the OpenCode server did not listen within %v (%w); its output: %s", a.cfg.StartTimeout, context.Cause(ctx), out.tail())
	}
}

// compatible holds the CLI path@version pairs whose /doc passed CheckAPI in
// this process: the document (0.5 MiB, built on request) is fetched and
// checked once per OpenCode binary and version, not for every session.
var compatible sync.Map

// prepare checks a new server's API (once per Agent, and its OpenAPI
// document once per OpenCode version) and creates the OpenCode session, or
// checks that the one the agent has is there.
func (a *Agent) prepare(ctx context.Context, s *server) error {
	a.mu.Lock()
	checked, session := a.version != "", a.session
	a.mu.Unlock()
	if !checked {
		var h ocHealth
		if err := a.call(ctx, s, http.MethodGet, "/global/health", nil, http.StatusOK, &h); err != nil {
			return err
		}
		key := a.cfg.CLI + "@" + h.Version
		if _, ok := compatible.Load(key); !ok {
			var doc json.RawMessage
			if err := a.call(ctx, s, http.MethodGet, "/doc", nil, http.StatusOK, &doc); err != nil {
				return fmt.Errorf("%w (OpenCode %s serves its API description there; is %s OpenCode?)", err, TestedVersion, a.cfg.CLI)
			}
			if err := CheckAPI(doc, h.Version); err != nil {
				return err
			}
			compatible.Store(key, true)
		}
		if h.Version != TestedVersion {
			a.log.Warn("this OpenCode version is not the one the agent is tested with; its API has what the agent uses", "version", h.Version, "tested", TestedVersion)
		}
		a.mu.Lock()
		a.version = h.Version
		a.mu.Unlock()
	}
	if session != "" {
		var got ocSession
		if err := a.call(ctx, s, http.MethodGet, "/session/"+session, nil, http.StatusOK, &got); err != nil {
			return fmt.Errorf("opencode agent: OpenCode session %s is not in the box: %w", session, err)
		}
		return nil
	}
	// A title of our own: OpenCode would otherwise ask the model for one,
	// a request of its own for every session.
	var created ocSession
	title := "Harvest session " + a.cfg.SessionID
	if err := a.call(ctx, s, http.MethodPost, "/session", map[string]any{"title": title}, http.StatusOK, &created); err != nil {
		return err
	}
	if created.ID == "" {
		return errors.New("opencode agent: POST /session answered no session id")
	}
	a.mu.Lock()
	a.session = created.ID
	a.mu.Unlock()
	return nil
}

// maxAnswerBytes bounds an API answer (the OpenAPI document is 0.5 MiB; a
// session's messages are bounded by Config.MaxStateBytes after).
const maxAnswerBytes = 256 << 20

// call makes one API request, bounded by requestTimeout, and decodes the
// answer into out (nil: discarded).
func (a *Agent) call(ctx context.Context, s *server, method, p string, body any, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+p, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("opencode agent: %s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return fmt.Errorf("opencode agent: %s %s: reading the answer: %w", method, p, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("opencode agent: %s %s: %s: %s", method, p, resp.Status, excerpt(b))
	}
	if len(b) > maxAnswerBytes {
		return fmt.Errorf("opencode agent: %s %s: the answer is over %d bytes", method, p, maxAnswerBytes)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = b
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("opencode agent: %s %s: unexpected answer (%v): %s", method, p, err, excerpt(b))
	}
	return nil
}

// abort asks OpenCode to stop what the session does; OpenCode kills the
// process tree of a running tool.
func (a *Agent) abort(ctx context.Context, s *server, session string) error {
	return a.call(ctx, s, http.MethodPost, "/session/"+session+"/abort", nil, http.StatusOK, nil)
}

func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// outputTail keeps the end of the server's output (for error messages)
// and reports the address it prints when it listens. The process's output
// copiers call Write.
type outputTail struct {
	mu        sync.Mutex
	buf       []byte // the last tailBytes bytes
	line      []byte // the current, unfinished line (bounded)
	found     bool
	listening chan string // receives the address once
}

const (
	tailBytes     = 8 << 10
	listeningLine = "opencode server listening on "
)

func newOutputTail() *outputTail { return &outputTail{listening: make(chan string, 1)} }

func (o *outputTail) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if len(o.buf) > tailBytes {
		o.buf = append(o.buf[:0], o.buf[len(o.buf)-tailBytes:]...)
	}
	if o.found {
		return len(p), nil
	}
	for _, c := range p {
		if c != '\n' {
			if len(o.line) < 4096 {
				o.line = append(o.line, c)
			}
			continue
		}
		line := strings.TrimSpace(string(o.line))
		o.line = o.line[:0]
		if addr, ok := strings.CutPrefix(line, listeningLine); ok && !o.found {
			o.found = true
			o.listening <- addr
		}
	}
	return len(p), nil
}

// tail is the last lines of output, on one line, without the lines every
// start prints.
func (o *outputTail) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var keep []string
	for _, l := range strings.Split(string(o.buf), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, listeningLine) || strings.HasPrefix(l, "Warning: OPENCODE_SERVER_PASSWORD") {
			continue
		}
		keep = append(keep, l)
	}
	s := strings.Join(keep, " | ")
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
