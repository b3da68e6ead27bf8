package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxBody bounds a request body; real prompts with many tools are ~100 KB.
const maxBody = 64 << 20

// Request is one request the sim saw, as kept in its log.
type Request struct {
	Seq    int       `json:"seq"`  // 1, 2, … in arrival order
	Time   time.Time `json:"time"` // arrival
	API    string    `json:"api"`  // "anthropic" | "openai" ("" for a path of neither)
	Method string    `json:"method"`
	Path   string    `json:"path"`  // without the query
	Query  string    `json:"query"` // raw query, like beta=true
	Model  string    `json:"model"`
	Stream bool      `json:"stream"`
	Turn   int       `json:"turn"`
	Rule   string    `json:"rule"`   // the rule (or "cassette #N", "record") that answered; "" if none
	Status int       `json:"status"` // the response status
	// Error is the message of an error response the sim made itself (a
	// validation failure, an unmatched request, a scripted error), or why a
	// reply was cut short; "" otherwise.
	Error string `json:"error,omitempty"`
	// Body is the raw request body; a body that is not JSON is kept as a JSON
	// string.
	Body   json.RawMessage `json:"body"`
	Header http.Header     `json:"header"` // as received, API keys included
}

// Server serves a script (or a cassette, or proxies and records) over the
// Anthropic and OpenAI wire protocols. It is an http.Handler; use it with
// httptest.NewServer or an http.Server.
type Server struct {
	script *Script
	logger *slog.Logger
	rec    *recorder
	replay *replayer

	mu   sync.Mutex
	seq  int
	uses []int // per rule
	next int   // sequence mode: the current rule
	log  []Request
}

// Option configures a Server.
type Option func(*Server)

// WithLogger logs one line per request to l (the default discards).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.logger = l } }

// WithRecord makes the server a recording proxy: every request goes to
// upstream (like https://api.anthropic.com) and the exchange, response bytes
// exactly as received, is appended to the cassette at path (rewritten after
// each exchange, API keys redacted). The script is not used.
func WithRecord(upstream *url.URL, path string) Option {
	return func(s *Server) { s.rec = newRecorder(upstream, path) }
}

// WithReplay serves the cassette c instead of a script.
func WithReplay(c *Cassette) Option { return func(s *Server) { s.replay = newReplayer(c) } }

// New returns a server for script s (nil with WithRecord or WithReplay).
func New(s *Script, opts ...Option) *Server {
	srv := &Server{script: s, logger: slog.New(slog.DiscardHandler)}
	if s != nil {
		srv.uses = make([]int, len(s.Rules))
	}
	for _, o := range opts {
		o(srv)
	}
	return srv
}

// Requests returns a copy of the request log, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.log)
	for i := range out {
		out[i].Header = out[i].Header.Clone()
	}
	slices.SortFunc(out, func(a, b Request) int { return a.Seq - b.Seq })
	return out
}

// ServeHTTP answers one request and logs it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_sim/requests" {
		s.serveLog(w, r)
		return
	}
	start := time.Now()
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()

	req := &Request{
		Seq: seq, Time: start, API: apiOf(r), Method: r.Method,
		Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(),
	}
	// The entry enters the log when the response starts, so a client that
	// has read a reply (a stream ends at message_stop or [DONE], before the
	// handler returns) always finds its request in the log; it is updated
	// when the handler is done.
	idx := -1
	commit := func(status int) {
		req.Status = status
		s.mu.Lock()
		idx = len(s.log)
		s.log = append(s.log, *req)
		s.mu.Unlock()
	}
	sw := &statusWriter{ResponseWriter: w, onHeader: commit}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		req.Body = jsonBody(body)
		s.apiError(sw, req, http.StatusBadRequest, "", "reading the request body: "+err.Error())
	case len(body) > maxBody:
		req.Body = jsonBody(nil)
		s.apiError(sw, req, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body larger than %d bytes", maxBody))
	default:
		req.Body = jsonBody(body)
		switch {
		case s.rec != nil:
			s.rec.serve(sw, r, body, req)
		case s.replay != nil:
			s.replay.serve(sw, r, body, req)
		default:
			s.route(sw, r, body, req)
		}
	}
	if sw.status == 0 {
		// The client went away before the reply started (during a delay):
		// logged as nginx's 499, nothing written.
		req.Error = "the client closed the request before the reply"
		commit(499)
	}
	s.mu.Lock()
	s.log[idx] = *req
	s.mu.Unlock()
	s.logger.Info("request", "seq", seq, "api", req.API, "method", req.Method, "path", req.Path,
		"model", req.Model, "stream", req.Stream, "turn", req.Turn, "rule", req.Rule,
		"status", req.Status, "key", maskedKey(r.Header), "ms", time.Since(start).Milliseconds(),
		"error", req.Error)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, body []byte, req *Request) {
	switch r.URL.Path {
	case "/v1/messages", "/v1/messages/count_tokens":
		if r.Method != http.MethodPost {
			s.apiError(w, req, http.StatusMethodNotAllowed, "", "Method Not Allowed: use POST")
			return
		}
		s.anthropic(w, r, body, req, r.URL.Path == "/v1/messages/count_tokens")
	case "/v1/chat/completions":
		if r.Method != http.MethodPost {
			s.apiError(w, req, http.StatusMethodNotAllowed, "", fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path))
			return
		}
		s.openai(w, r, body, req)
	case "/v1/models":
		if r.Method != http.MethodGet {
			s.apiError(w, req, http.StatusMethodNotAllowed, "", "Method Not Allowed: use GET")
			return
		}
		s.models(w, req)
	default:
		if req.API == APIOpenAI {
			s.apiError(w, req, http.StatusNotFound, "", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path))
		} else {
			s.apiError(w, req, http.StatusNotFound, "", "Not Found")
		}
	}
}

// apiOf tells which API a request speaks: by path, then by the headers each
// API's clients always send.
func apiOf(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/messages") || strings.HasPrefix(p, "/v1/complete"):
		return APIAnthropic
	case strings.HasPrefix(p, "/v1/chat/") || strings.HasPrefix(p, "/v1/completions") ||
		strings.HasPrefix(p, "/v1/responses") || strings.HasPrefix(p, "/v1/embeddings"):
		return APIOpenAI
	case r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != "":
		return APIAnthropic
	case strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || strings.HasPrefix(p, "/v1/"):
		return APIOpenAI
	}
	return ""
}

// apiError answers with an error in the shape of the request's API.
func (s *Server) apiError(w http.ResponseWriter, req *Request, status int, typ, msg string) {
	req.Error = msg
	if req.API == APIOpenAI {
		writeOpenAIError(w, status, openAIError{Type: typ, Message: msg}, 0, false)
		return
	}
	writeAnthropicError(w, status, typ, msg, 0, false)
}

func (s *Server) serveLog(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	reqs := s.Requests()
	if reqs == nil {
		reqs = []Request{}
	}
	json.NewEncoder(w).Encode(reqs)
}

func (s *Server) models(w http.ResponseWriter, req *Request) {
	var ids []string
	if s.script != nil {
		ids = append(ids, s.script.Models...)
		for _, r := range s.script.Rules {
			if m := r.When.Model; m != "" && !strings.ContainsAny(m, `*?[\`) && !contains(ids, m) {
				ids = append(ids, m)
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	created := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if req.API == APIOpenAI {
		type model struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		}
		out := struct {
			Object string  `json:"object"`
			Data   []model `json:"data"`
		}{Object: "list", Data: []model{}}
		for _, id := range ids {
			out.Data = append(out.Data, model{ID: id, Object: "model", Created: created.Unix(), OwnedBy: "harvest-sim"})
		}
		w.Header().Set("x-request-id", newID("req_", 32))
		json.NewEncoder(w).Encode(out)
		return
	}
	type model struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	out := struct {
		Data    []model `json:"data"`
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}{Data: []model{}}
	for _, id := range ids {
		out.Data = append(out.Data, model{Type: "model", ID: id, DisplayName: id, CreatedAt: created.Format(time.RFC3339)})
	}
	if len(ids) > 0 {
		out.FirstID, out.LastID = &ids[0], &ids[len(ids)-1]
	}
	w.Header().Set("request-id", newID("req_", 24))
	json.NewEncoder(w).Encode(out)
}

// answer picks the rule for x and records the choice on req; on no match it
// answers the error itself and returns nil.
func (s *Server) answer(w http.ResponseWriter, req *Request, x *exchange) *Rule {
	req.Model, req.Stream, req.Turn = x.model, x.stream, x.turn
	s.mu.Lock()
	rule, err := s.pick(x, req.Seq)
	s.mu.Unlock()
	if err != nil {
		s.apiError(w, req, http.StatusBadRequest, "", err.Error())
		return nil
	}
	req.Rule = rule.Name
	return rule
}

// usage resolves a reply's usage: the rule's, then the script's defaults,
// then estimates (input from the request size, output from the reply).
func (s *Server) usage(r *Rule, x *exchange) (in, out, cacheRead, cacheWrite int) {
	u := r.Reply.Usage
	if s.script != nil {
		u = u.merge(s.script.Defaults.Usage)
	}
	return intOr(u.InputTokens, x.inputTokens), intOr(u.OutputTokens, replyTokens(&r.Reply)),
		intOr(u.CacheReadInputTokens, 0), intOr(u.CacheCreationInputTokens, 0)
}

// delays returns the wait before the response and between chunks.
func (s *Server) delays(r *Rule) (before, chunk time.Duration) {
	before, chunk = r.Reply.Delay, r.Reply.ChunkDelay
	if s.script != nil {
		if before == 0 {
			before = s.script.Defaults.Delay
		}
		if chunk == 0 {
			chunk = s.script.Defaults.ChunkDelay
		}
	}
	return before, chunk
}

// statusWriter calls onHeader with the status when the response starts;
// Unwrap lets http.ResponseController reach the connection's Flush.
type statusWriter struct {
	http.ResponseWriter
	status   int
	onHeader func(status int)
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.onHeader(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// jsonBody keeps a request body as JSON: as is when it is JSON, else as a
// JSON string.
func jsonBody(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return json.RawMessage(slices.Clone(b))
	}
	q, _ := json.Marshal(string(b))
	return q
}

// maskedKey shows enough of the API key a request carried to tell keys apart
// in a log line without printing it (the request log keeps it whole).
func maskedKey(h http.Header) string {
	k := h.Get("x-api-key")
	if k == "" {
		k = strings.TrimPrefix(h.Get("Authorization"), "Bearer ")
	}
	if k == "" {
		return "none"
	}
	if len(k) <= 12 {
		return fmt.Sprintf("%d chars", len(k))
	}
	return fmt.Sprintf("%s…%s (%d chars)", k[:6], k[len(k)-4:], len(k))
}
