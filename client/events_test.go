package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/server"
)

// The reader's wire parsing, on bytes (the server tests run it against
// the real server over HTTP).

func readAll(t *testing.T, wire string) ([]event.Event, error) {
	t.Helper()
	s := &Stream{opts: StreamOptions{IdleTimeout: time.Minute}}
	_, cancel := context.WithCancel(context.Background())
	cn := &sseConn{
		resp: &http.Response{Body: io.NopCloser(strings.NewReader(wire))}, rd: bufio.NewReaderSize(strings.NewReader(wire), 16),
		cancel: cancel, idle: time.AfterFunc(time.Hour, cancel),
	}
	defer cn.close()
	var out []event.Event
	for {
		ev, err := s.read(cn)
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestReadSSE(t *testing.T) {
	ev1 := `{"session":"s-aaaaaaaaaaaaaaaa","seq":1,"time":"2025-01-01T00:00:00Z","type":"session.state","data":{"state":"idle"}}`
	ev2 := `{"session":"s-aaaaaaaaaaaaaaaa","seq":2,"time":"2025-01-01T00:00:00Z","turn":"t1","type":"assistant.delta","data":{"text":"a line that is longer than the reader's buffer"}}`
	wire := "retry: 1000\r\n\r\n" +
		": keepalive\n\n" +
		"id: 1\nevent: session.state\ndata: " + ev1 + "\n\n" +
		"id: 2\r\nevent: assistant.delta\r\ndata: " + ev2 + "\r\n\r\n" +
		"event: stream.error\ndata: {\"error\":{\"code\":\"too_slow\",\"message\":\"cut off\"}}\n\n"
	evs, err := readAll(t, wire)
	var end *streamEnd
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Data.(event.AssistantDelta).Text == "" || !errors.As(err, &end) || end.Code != server.StreamTooSlow {
		t.Fatalf("%+v %v", evs, err)
	}

	// A stream cut in the middle of an event is a read error (reconnect),
	// not an event.
	evs, err = readAll(t, "id: 1\nevent: session.state\ndata: "+ev1)
	if len(evs) != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v %v", evs, err)
	}
	// Data split over lines is joined with newlines (and then is not JSON
	// here: a protocol error, which ends the stream).
	_, err = readAll(t, "id: 1\nevent: session.state\ndata: {\"session\":\ndata: 1}\n\n")
	if !errors.Is(err, errProtocol) {
		t.Errorf("two data lines: %v", err)
	}
	// The SSE id and type must be the event's own.
	for _, wire := range []string{
		"id: 7\nevent: session.state\ndata: " + ev1 + "\n\n",
		"id: 1\nevent: turn.started\ndata: " + ev1 + "\n\n",
		"event: stream.error\ndata: not json\n\n",
		"id: 1\nevent: bogus.type\ndata: {\"seq\":1,\"type\":\"bogus.type\",\"data\":{}}\n\n",
	} {
		if _, err := readAll(t, wire); !errors.Is(err, errProtocol) {
			t.Errorf("%q: %v, want a protocol error", wire, err)
		}
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7777", "ftp://x", "http://"} {
		if _, err := New(u, "", nil); err == nil || !strings.Contains(err.Error(), "http://HOST:PORT") {
			t.Errorf("%q: %v", u, err)
		}
	}
	if c, err := New("http://127.0.0.1:7777/", "", nil); err != nil || c.URL() != "http://127.0.0.1:7777" {
		t.Errorf("%v %v", c, err)
	}
}
