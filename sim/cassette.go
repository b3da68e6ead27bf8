package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Cassette is a recording of real API traffic: each request and the exact
// bytes of its response. Files are JSON, written by --record and read by
// --replay.
type Cassette struct {
	Version      int           `json:"version"`
	Upstream     string        `json:"upstream"`
	RecordedAt   time.Time     `json:"recorded_at"`
	Interactions []Interaction `json:"interactions"`
}

// Interaction is one request and its response.
type Interaction struct {
	Request  RecordedRequest  `json:"request"`
	Response RecordedResponse `json:"response"`
}

// RecordedRequest is a request as sent upstream, API keys redacted.
type RecordedRequest struct {
	Method string      `json:"method"`
	Path   string      `json:"path"` // with the query
	Header http.Header `json:"header"`
	Body   Bytes       `json:"body"`
}

// RecordedResponse is the response exactly as the upstream sent it (the body
// decoded from any content-encoding).
type RecordedResponse struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   Bytes       `json:"body"`
}

// Bytes is exact bytes in JSON: a string when they are UTF-8 (readable, and
// SSE streams stay diffable), else {"base64": "..."}.
type Bytes []byte

func (b Bytes) MarshalJSON() ([]byte, error) {
	if utf8.Valid(b) {
		return json.Marshal(string(b))
	}
	return json.Marshal(map[string][]byte{"base64": b})
}

func (b *Bytes) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = []byte(s)
		return nil
	}
	var m struct {
		Base64 []byte `json:"base64"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("body must be a string or {\"base64\": ...}: %w", err)
	}
	*b = m.Base64
	return nil
}

// LoadCassette reads a cassette file.
func LoadCassette(path string) (*Cassette, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading cassette: %w", err)
	}
	var c Cassette
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("cassette %s: %w", path, err)
	}
	if c.Version != 1 {
		return nil, fmt.Errorf("cassette %s: version %d, this sim reads version 1", path, c.Version)
	}
	for i, in := range c.Interactions {
		if in.Request.Method == "" || in.Request.Path == "" || in.Response.Status == 0 {
			return nil, fmt.Errorf("cassette %s: interaction %d lacks a method, path or status", path, i+1)
		}
	}
	return &c, nil
}

// secretHeaders are redacted in cassettes (compared lowercase).
var secretHeaders = []string{"x-api-key", "authorization", "api-key", "proxy-authorization", "cookie", "set-cookie", "x-goog-api-key"}

// hopHeaders are per connection and never copied through the proxy.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Content-Length"}

func redact(h http.Header) http.Header {
	out := h.Clone()
	for k := range out {
		if contains(secretHeaders, strings.ToLower(k)) {
			out[k] = []string{"REDACTED"}
		}
	}
	return out
}

// recorder proxies requests to the upstream and appends each exchange to the
// cassette file.
type recorder struct {
	upstream *url.URL
	path     string
	client   *http.Client

	mu       sync.Mutex
	cassette Cassette
}

func newRecorder(upstream *url.URL, path string) *recorder {
	return &recorder{
		upstream: upstream,
		path:     path,
		client:   &http.Client{}, // no timeout: streams last as long as the model writes
		cassette: Cassette{Version: 1, Upstream: upstream.String(), RecordedAt: time.Now().UTC(), Interactions: []Interaction{}},
	}
}

func (rc *recorder) serve(w http.ResponseWriter, r *http.Request, body []byte, req *Request) {
	req.Rule = "record"
	fillFacts(req, body)
	target := *rc.upstream
	target.Path = strings.TrimSuffix(target.Path, "/") + r.URL.Path
	target.RawQuery = r.URL.RawQuery
	up, err := http.NewRequestWithContext(r.Context(), r.Method, target.String(), bytes.NewReader(body))
	if err != nil {
		rc.fail(w, req, err)
		return
	}
	up.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		up.Header.Del(h)
	}
	// Let the transport negotiate compression and decode it, so the cassette
	// holds readable bytes.
	up.Header.Del("Accept-Encoding")
	resp, err := rc.client.Do(up)
	if err != nil {
		rc.fail(w, req, err)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		if !contains(hopHeaders, http.CanonicalHeaderKey(k)) {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	// Pass each piece on as it arrives (streams stay streams) and keep a copy.
	var got bytes.Buffer
	flush := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			got.Write(buf[:n])
			if _, err := w.Write(buf[:n]); err == nil {
				flush.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			req.Error = "reading the upstream response: " + rerr.Error()
			return // a broken exchange is not recorded
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	hdr := resp.Header.Clone()
	for _, h := range hopHeaders {
		hdr.Del(h)
	}
	hdr.Del("Content-Encoding")
	rc.cassette.Interactions = append(rc.cassette.Interactions, Interaction{
		Request:  RecordedRequest{Method: r.Method, Path: r.URL.RequestURI(), Header: redact(r.Header), Body: body},
		Response: RecordedResponse{Status: resp.StatusCode, Header: redact(hdr), Body: got.Bytes()},
	})
	if err := rc.save(); err != nil {
		req.Error = "writing the cassette: " + err.Error()
	}
}

func (rc *recorder) fail(w http.ResponseWriter, req *Request, err error) {
	msg := fmt.Sprintf("harvest sim: recording: the upstream %s failed: %v", rc.upstream, err)
	req.Error = msg
	if req.API == APIOpenAI {
		writeOpenAIError(w, http.StatusBadGateway, openAIError{Type: "server_error", Message: msg}, 0, false)
		return
	}
	writeAnthropicError(w, http.StatusBadGateway, "api_error", msg, 0, false)
}

// save writes the whole cassette to a temporary file and renames it into
// place, so a reader (or a crash) never sees half a file. Callers hold rc.mu.
func (rc *recorder) save() error {
	data, err := json.MarshalIndent(&rc.cassette, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(rc.path), filepath.Base(rc.path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), rc.path)
}

// replayer serves a cassette: each request gets the first unused interaction
// with the same method and path (the query aside: Claude Code adds
// ?beta=true, SDKs do not) and an equal JSON body; failing that, the next
// unused one in recorded order with the same method, path and stream flag
// (real clients put session ids and dates in their bodies, which never
// repeat).
type replayer struct {
	c    *Cassette
	mu   sync.Mutex
	used []bool
}

func newReplayer(c *Cassette) *replayer {
	return &replayer{c: c, used: make([]bool, len(c.Interactions))}
}

func (rp *replayer) find(method, path string, body []byte) (int, string) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	var want any
	wantOK := json.Unmarshal(body, &want) == nil
	byOrder := -1
	for i, in := range rp.c.Interactions {
		p, _, _ := strings.Cut(in.Request.Path, "?")
		if rp.used[i] || in.Request.Method != method || p != path {
			continue
		}
		if byOrder < 0 && streamFlag(in.Request.Body) == streamFlag(body) {
			byOrder = i
		}
		if bytes.Equal(in.Request.Body, body) {
			rp.used[i] = true
			return i, "body"
		}
		var got any
		if wantOK && json.Unmarshal(in.Request.Body, &got) == nil && reflect.DeepEqual(got, want) {
			rp.used[i] = true
			return i, "body"
		}
	}
	if byOrder >= 0 {
		rp.used[byOrder] = true
		return byOrder, "order"
	}
	return -1, ""
}

func streamFlag(body []byte) bool {
	var b struct {
		Stream bool `json:"stream"`
	}
	json.Unmarshal(body, &b)
	return b.Stream
}

func (rp *replayer) serve(w http.ResponseWriter, r *http.Request, body []byte, req *Request) {
	fillFacts(req, body)
	i, how := rp.find(r.Method, r.URL.Path, body)
	if i < 0 {
		msg := fmt.Sprintf("harvest sim: the cassette has no unused interaction for %s %s (%d recorded)", r.Method, r.URL.RequestURI(), len(rp.c.Interactions))
		req.Error = msg
		if req.API == APIOpenAI {
			writeOpenAIError(w, http.StatusBadRequest, openAIError{Message: msg}, 0, false)
		} else {
			writeAnthropicError(w, http.StatusBadRequest, "", msg, 0, false)
		}
		return
	}
	req.Rule = fmt.Sprintf("cassette #%d (by %s)", i+1, how)
	resp := rp.c.Interactions[i].Response
	for k, v := range resp.Header {
		if !contains(hopHeaders, http.CanonicalHeaderKey(k)) && !strings.EqualFold(k, "Content-Encoding") {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.Status)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		w.Write(resp.Body)
		return
	}
	// A stream is sent event by event, each flushed, as it was received.
	flush := http.NewResponseController(w)
	rest := []byte(resp.Body)
	for len(rest) > 0 {
		n := bytes.Index(rest, []byte("\n\n"))
		if n < 0 {
			n = len(rest)
		} else {
			n += 2
		}
		if _, err := w.Write(rest[:n]); err != nil {
			return
		}
		flush.Flush()
		rest = rest[n:]
	}
}

// fillFacts puts the model and stream flag of a proxied or replayed request
// into its log entry.
func fillFacts(req *Request, body []byte) {
	var b struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if json.Unmarshal(body, &b) == nil {
		req.Model, req.Stream = b.Model, b.Stream
	}
}
