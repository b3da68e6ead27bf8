package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"
)

// tunnel dials the target, answers 200, and copies bytes both ways until
// both sides are done, the tunnel idles, or ctx ends (revoke, max
// duration, shutdown). It fills st.
func (p *Proxy) tunnel(ctx context.Context, g *grant, w http.ResponseWriter, r *http.Request, addrs []netip.Addr, port int, st *Stats) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		st.Status, st.Error = http.StatusInternalServerError, "the server cannot hijack connections (HTTP/2?)"
		http.Error(w, "harvest egress: CONNECT needs HTTP/1.1", st.Status)
		return
	}
	upstream, err := p.dialChecked(ctx, addrs, port)
	if err != nil {
		st.Status, st.Error = http.StatusBadGateway, err.Error()
		http.Error(w, fmt.Sprintf("harvest egress: connecting to %s port %d: %v", st.Host, port, err), st.Status)
		return
	}
	defer upstream.Close()
	client, brw, err := hj.Hijack()
	if err != nil {
		st.Status, st.Error = http.StatusInternalServerError, "hijacking: "+err.Error()
		return
	}
	defer client.Close()
	st.Status = http.StatusOK
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		st.Error, st.End = "answering the client: "+err.Error(), "closed"
		return
	}

	var last atomic.Int64 // UnixNano of the last byte either way
	last.Store(time.Now().UnixNano())
	finished := make(chan error, 2)
	pipe := func(dst net.Conn, src io.Reader, n *int64) {
		err := copyCounting(dst, src, n, &last)
		// At the source's EOF, pass it on; if dst cannot half-close, or
		// on an error, close dst, which ends the other way too.
		if cw, ok := dst.(interface{ CloseWrite() error }); !ok || err != nil || cw.CloseWrite() != nil {
			dst.Close()
		}
		finished <- err
	}
	// brw.Reader holds whatever the client sent after its CONNECT, then
	// reads from client.
	go pipe(upstream, brw.Reader, &st.BytesUp)
	go pipe(client, upstream, &st.BytesDown)

	closeBoth := func() {
		client.Close()
		upstream.Close()
	}
	timer := time.NewTimer(p.idle)
	defer timer.Stop()
	done := 0
	for done < 2 && st.End == "" {
		select {
		case err := <-finished:
			done++
			if !closedNormally(err) {
				st.End, st.Error = "closed", err.Error()
				closeBoth()
			}
		case <-timer.C:
			if quiet := time.Since(time.Unix(0, last.Load())); quiet >= p.idle {
				st.End = "idle"
				closeBoth()
			} else {
				timer.Reset(p.idle - quiet)
			}
		case <-ctx.Done():
			switch {
			case g.ctx.Err() != nil:
				st.End = "revoked"
			case errors.Is(context.Cause(ctx), errMaxDuration):
				st.End = "max duration"
			default:
				st.End = "shutdown"
			}
			closeBoth()
		}
	}
	if st.End == "" {
		st.End = "closed"
	}
	for ; done < 2; done++ {
		<-finished
	}
	// Both pipes have returned: their counts are final.
}

// closedNormally reports whether err, from one way of a tunnel, is how a
// tunnel ends when a side closes it rather than a failure of the tunnel:
//
//   - nil: the source's EOF (a FIN).
//   - net.ErrClosed: the proxy closed the connection itself, because the
//     other way ended or the tunnel was cut (idle, revoke, ...). Whatever
//     made it close is recorded in its own right; this is only the echo,
//     and it may even arrive first, as the two ways race to report.
//   - ECONNRESET, EPIPE: a peer that closes with bytes still in flight
//     (a client done with its TLS session while the server's close_notify
//     is on its way, say) resets the connection instead of finishing it.
//     That is an ordinary close in TCP, and the proxy cannot tell it from
//     an abort: either way the side chose to close.
//
// Anything else (a timeout of the peer's TCP stack, an unreachable host)
// is an error of the tunnel and is reported as one.
func closedNormally(err error) bool {
	return err == nil || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// copyCounting copies src to dst, adding what it wrote to *n and noting
// the time of each read in last. It returns nil at src's EOF, and the
// error otherwise. The goroutine calling it owns *n until it returns.
func copyCounting(dst io.Writer, src io.Reader, n *int64, last *atomic.Int64) error {
	buf := make([]byte, 32<<10)
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			last.Store(time.Now().UnixNano())
			w, werr := dst.Write(buf[:k])
			atomic.AddInt64(n, int64(w))
			if werr != nil {
				return werr
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
