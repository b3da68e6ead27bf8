package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/wire"
)

// The tests run the whole server for real (internal/stacktest/apitest):
// SQLite in a temporary directory, the real journal and session.Manager,
// real local sandboxes (their own run dir), the builtin agent against
// harvest sim, and the API over real HTTP on 127.0.0.1. When a test ends,
// no goroutine it started may be left, and every status a route answered
// must be in openapi.json.

// script answers "msg ..." with "ok"; "long task" runs a bash command that
// waits for the file "go" in the workspace (the test creates it to end the
// turn), then answers "long task done"; "budget task" makes two model
// calls (a bash command, then an answer).
const script = `
rules:
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: released
    when: {tool_result: "released"}
    reply: {text: "long task done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: budgeted
    when: {tool_result: "budgeted"}
    reply: {text: "the second call of a budgeted turn", usage: {input_tokens: 100, output_tokens: 10}}
  - name: budget
    when: {last_user: "budget task"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo budgeted"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.01; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// apiEnv is a running API, and the server tests' own ways to talk to it.
type apiEnv struct{ *apitest.API }

func newAPIEnv(t testing.TB, opts ...apitest.Option) *apiEnv {
	t.Helper()
	return &apiEnv{apitest.New(t, script, opts...)}
}

// create makes a session of c on the test repository.
func (e *apiEnv) create(c *client.Client, prompt string) *wire.View {
	e.T.Helper()
	v, err := c.CreateSession(testbin.Context(e.T), wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}, Prompt: prompt})
	if err != nil {
		e.T.Fatal(err)
	}
	return v
}

// rawStream is an SSE connection read line by line, for the tests that
// check the wire itself.
type rawStream struct {
	resp *http.Response
	rd   *bufio.Reader
}

// sseEvent is one dispatched SSE event.
type sseEvent struct {
	id, typ, data string
	comments      []string
}

func (e *apiEnv) openRaw(token, id string, header http.Header, query string) *rawStream {
	e.T.Helper()
	u := e.URL + "/v1/sessions/" + id + "/events"
	if query != "" {
		u += "?" + query
	}
	req, _ := http.NewRequestWithContext(testbin.Context(e.T), http.MethodGet, u, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.Transport.RoundTrip(req)
	if err != nil {
		e.T.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.T.Fatalf("GET %s: %s %s", u, resp.Status, b)
	}
	rs := &rawStream{resp: resp, rd: bufio.NewReader(resp.Body)}
	e.T.Cleanup(rs.close)
	return rs
}

func (r *rawStream) close() { r.resp.Body.Close() }

// next reads one event (an error at the end of the stream).
func (r *rawStream) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := r.rd.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.data != "" || ev.typ != "" || len(ev.comments) > 0 {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			ev.comments = append(ev.comments, line)
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		case strings.HasPrefix(line, "retry: "):
		default:
			return ev, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// doRaw sends one request and returns the status and, for an error, the
// decoded envelope (failing the test when an error is not one).
func (e *apiEnv) doRaw(method, path, token, contentType string, body []byte) (int, server.ErrorInfo, http.Header) {
	e.T.Helper()
	req, err := http.NewRequestWithContext(testbin.Context(e.T), method, e.URL+path, bytes.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.Transport.RoundTrip(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb server.ErrorBody
	if resp.StatusCode >= 400 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" || resp.Header.Get("Content-Type") != "application/json" {
			e.T.Errorf("%s %s: %d with a body that is not the error envelope (%v): %s", method, path, resp.StatusCode, err, b)
		}
	}
	return resp.StatusCode, eb.Error, resp.Header
}
