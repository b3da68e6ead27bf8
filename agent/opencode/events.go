package opencode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// maxEventBytes bounds one event of the stream (a tool part carries the
// tool's whole output; OpenCode truncates those to tens of KiB).
const maxEventBytes = 16 << 20

// subscription is one open GET /event stream. Its reader goroutine is
// owned by the subscription: close cancels the request and waits for it.
type subscription struct {
	events chan ocEvent // closed when the stream ends
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error // why the stream ended
}

// subscribe opens the event stream and waits for OpenCode's first event
// (server.connected), so that nothing the next request causes is missed.
func (a *Agent) subscribe(ctx context.Context, s *server) (*subscription, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, s.base+"/event", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	type result struct {
		resp *http.Response
		err  error
	}
	// The request's context outlives ctx (the stream must survive a
	// cancelled turn, to see the abort through), so ctx bounds the wait
	// for the answer here.
	rc := make(chan result, 1)
	go func() {
		resp, err := a.client.Do(req)
		rc <- result{resp, err}
	}()
	var r result
	t := time.NewTimer(requestTimeout)
	defer t.Stop()
	select {
	case r = <-rc:
	case <-ctx.Done():
		cancel()
		if r := <-rc; r.resp != nil {
			r.resp.Body.Close()
		}
		return nil, context.Cause(ctx)
	case <-t.C:
		cancel()
		if r := <-rc; r.resp != nil {
			r.resp.Body.Close()
		}
		return nil, fmt.Errorf("opencode agent: GET /event: no answer within %v", requestTimeout)
	}
	if r.err != nil {
		cancel()
		return nil, fmt.Errorf("opencode agent: GET /event: %w", r.err)
	}
	if r.resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(r.resp.Body, 4096))
		r.resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("opencode agent: GET /event: %s: %s", r.resp.Status, excerpt(b))
	}
	sub := &subscription{events: make(chan ocEvent, 64), cancel: cancel}
	sub.wg.Add(1)
	go func() {
		defer sub.wg.Done()
		defer close(sub.events)
		defer r.resp.Body.Close()
		err := readSSE(r.resp.Body, func(e ocEvent) bool {
			select {
			case sub.events <- e:
				return true
			case <-sctx.Done():
				return false
			}
		})
		sub.mu.Lock()
		sub.err = err
		sub.mu.Unlock()
	}()
	select {
	case e, ok := <-sub.events:
		if ok && e.Type == "server.connected" {
			return sub, nil
		}
		sub.close()
		if !ok {
			return nil, fmt.Errorf("opencode agent: the event stream ended at once: %v", sub.cause())
		}
		return nil, fmt.Errorf("opencode agent: the event stream began with %q, not server.connected", e.Type)
	case <-ctx.Done():
		sub.close()
		return nil, context.Cause(ctx)
	case <-t.C:
		sub.close()
		return nil, fmt.Errorf("opencode agent: GET /event: no server.connected within %v", requestTimeout)
	}
}

// cause is why the stream ended (after events was closed).
func (s *subscription) cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return io.EOF
	}
	return s.err
}

// close ends the stream and waits for its reader.
func (s *subscription) close() {
	s.cancel()
	s.wg.Wait()
}

// readSSE reads a server-sent event stream, calling deliver with each
// event's data decoded, until the stream ends or deliver returns false. A
// data line that is not an event is skipped; an event over maxEventBytes
// ends the stream with an error.
func readSSE(r io.Reader, deliver func(ocEvent) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	for {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		switch {
		case len(line) == 0: // end of an event
			if len(data) > 0 {
				var e ocEvent
				if json.Unmarshal(data, &e) == nil && e.Type != "" {
					if !deliver(e) {
						return nil
					}
				}
				data = data[:0]
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			if len(data)+len(v) > maxEventBytes {
				return fmt.Errorf("an event over %d bytes", maxEventBytes)
			}
			data = append(data, v...)
		}
	}
}

// readLine reads one line without its line ending, bounded by
// maxEventBytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxEventBytes+16 {
			return nil, fmt.Errorf("a line over %d bytes", maxEventBytes)
		}
		if err == nil {
			return bytes.TrimRight(line, "\r\n"), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err == io.EOF && len(line) > 0 {
				return bytes.TrimRight(line, "\r\n"), nil
			}
			return nil, err
		}
	}
}
