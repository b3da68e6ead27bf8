package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync/atomic"
)

// forwardState carries a plain-HTTP request's checked addresses to the
// dial, and its outcome back.
type forwardState struct {
	addrs  []netip.Addr
	port   int
	status int
	down   atomic.Int64
	err    error
}

type forwardKey struct{}

// newForwarder returns the reverse proxy for plain-HTTP requests. It
// keeps no upstream connections (a pooled one would outlive Serve, and
// mix sessions' bytes), uses no proxy of the host's, and drops the
// client's hop-by-hop headers, Proxy-Authorization included.
func (p *Proxy) newForwarder() *httputil.ReverseProxy {
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			s, _ := ctx.Value(forwardKey{}).(*forwardState)
			if s == nil {
				// Not through forwardHTTP: check the target here.
				h, ps, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				port, _ := strconv.Atoi(ps)
				addrs, err := p.resolve(ctx, h)
				if err != nil {
					return nil, err
				}
				s = &forwardState{addrs: addrs, port: port}
			}
			return p.dialChecked(ctx, s.addrs, s.port)
		},
		DisableKeepAlives:     true,
		DisableCompression:    true,
		ResponseHeaderTimeout: p.idle,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = "" // the URL's host
		},
		Transport: tr,
		ModifyResponse: func(resp *http.Response) error {
			s := resp.Request.Context().Value(forwardKey{}).(*forwardState)
			s.status = resp.StatusCode
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &s.down}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s := r.Context().Value(forwardKey{}).(*forwardState)
			s.err = err
			s.status = http.StatusBadGateway
			var fe *forbiddenError
			if errors.As(err, &fe) {
				s.status = http.StatusForbidden
			}
			http.Error(w, fmt.Sprintf("harvest egress: %s: %v", r.URL.Host, err), s.status)
		},
	}
}

// forwardHTTP forwards a plain-HTTP request to one of addrs, and fills st.
func (p *Proxy) forwardHTTP(ctx context.Context, w http.ResponseWriter, r *http.Request, addrs []netip.Addr, port int, st *Stats) {
	s := &forwardState{addrs: addrs, port: port}
	var up atomic.Int64
	r = r.WithContext(context.WithValue(ctx, forwardKey{}, s))
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, n: &up}
	}
	p.forward.ServeHTTP(w, r)
	st.Status, st.BytesUp, st.BytesDown = s.status, up.Load(), s.down.Load()
	if s.err != nil {
		st.Error = s.err.Error()
	}
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
