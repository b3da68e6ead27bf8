package builtin

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/harvest-dev/harvest/agent"
)

// maxMCPRedirects bounds the redirects a remote server's requests follow.
const maxMCPRedirects = 10

// remoteClient is the HTTP client of a remote server s, over base: it
// adds s.Headers (its credentials) on the host, to requests to s's origin
// only, and follows a redirect only within that origin (each hop is
// dialed, and so checked, by base like the first). A redirect elsewhere
// is an error saying so: its Headers are the server's, and another host
// gets neither them nor a request made on the server's behalf.
func remoteClient(s agent.MCPServer, base http.RoundTripper) (*http.Client, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	origin := originOf(u)
	return &http.Client{
		Transport: headerTransport(origin, s.Headers, base),
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if o := originOf(req.URL); o != origin {
				return fmt.Errorf("MCP server %q redirects to %s, another origin than its own (%s): not followed", s.Name, o, origin)
			}
			if len(via) >= maxMCPRedirects {
				return fmt.Errorf("MCP server %q: stopped after %d redirects", s.Name, maxMCPRedirects)
			}
			return nil
		},
	}, nil
}

// originOf is u's scheme, host and port (the scheme's when u gives none).
func originOf(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// headerTransport adds a remote server's headers (its credentials) to
// every request to origin, on the host, and sends them nowhere else.
func headerTransport(origin string, headers map[string]string, base http.RoundTripper) http.RoundTripper {
	if len(headers) == 0 {
		return base
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if originOf(r.URL) != origin {
			return nil, fmt.Errorf("a request to %s, not the MCP server's origin %s: its headers are not sent there", originOf(r.URL), origin)
		}
		r = r.Clone(r.Context())
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		return base.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// handlerTransport calls an http.Handler in-process: the response's body
// streams what the handler writes as it writes it (an SSE stream flows),
// and closing the body ends the handler's request context. Each request's
// handler runs on a goroutine close waits for; close also ends the
// contexts of the requests still running.
type handlerTransport struct {
	h      http.Handler
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newHandlerTransport(h http.Handler) *handlerTransport {
	ctx, cancel := context.WithCancel(context.Background())
	return &handlerTransport{h: h, ctx: ctx, cancel: cancel}
}

func (t *handlerTransport) close() {
	t.cancel()
	t.wg.Wait()
}

func (t *handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.ctx.Err(); err != nil {
		return nil, fmt.Errorf("MCP server: the agent is closed")
	}
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(t.ctx, cancel)
	in := req.Clone(ctx)
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "127.0.0.1:0"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	// A handler blocked writing to a reader gone away returns.
	unblock := context.AfterFunc(ctx, func() { pr.CloseWithError(context.Canceled) })
	rw := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer unblock()
		defer func() {
			if p := recover(); p != nil {
				pw.CloseWithError(fmt.Errorf("MCP server handler panicked: %v", p))
				rw.markReady(http.StatusInternalServerError)
				return
			}
			rw.markReady(http.StatusOK)
			pw.Close()
		}()
		t.h.ServeHTTP(rw, in)
	}()
	select {
	case <-rw.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		stop()
		cancel()
		return nil, ctx.Err()
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", rw.status, http.StatusText(rw.status)), StatusCode: rw.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rw.sent, Body: &pipeBody{PipeReader: pr, done: func() { stop(); cancel() }},
		ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is the handler's ResponseWriter: the headers are sent (ready)
// at the first WriteHeader, Write or Flush; the body goes down the pipe.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
	sent   http.Header
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) markReady(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 200 {
		w.markReady(code)
	}
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.markReady(http.StatusOK)
	return w.pw.Write(p)
}

func (w *pipeWriter) Flush() { w.markReady(http.StatusOK) }

// pipeBody ends the handler's request when the client is done with it.
type pipeBody struct {
	*io.PipeReader
	done func()
}

func (b *pipeBody) Close() error {
	b.done()
	return b.PipeReader.Close()
}
