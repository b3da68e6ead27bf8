package boxhttp

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServeWaitsForHandlers: Serve returns only after a running handler
// (one that outlives a graceful shutdown: it waits for its context) has
// returned, and an accept failure is returned with the server's name.
func TestServeWaitsForHandlers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered, returned := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(entered)
		<-r.Context().Done() // ends when Serve's ctx does
		time.Sleep(50 * time.Millisecond)
		close(returned)
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h, Options{Name: "test proxy", Grace: 10 * time.Millisecond}) }()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve after ctx ended: %v", err)
	}
	select {
	case <-returned:
	default:
		t.Fatal("Serve returned before its handler did")
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()

	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	ln2.Close()
	if err := Serve(context.Background(), ln2, h, Options{Name: "test proxy"}); err == nil || err.Error()[:10] != "test proxy" {
		t.Fatalf("Serve on a closed listener: %v", err)
	}
}
