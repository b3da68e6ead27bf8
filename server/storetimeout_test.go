package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/wire"
)

// TestStoreTimeout: with the database file locked by another process
// (harvest store migrate's HoldWrites), every route that writes answers
// 503 with Retry-After within the store budget instead of waiting for
// the lock (SQLite's busy timeout is 10 s); reads still answer (WAL). A
// send cut that way was queued: once the lock is released, it is stored
// once, and its retry with the same idempotency key gets it back.
func TestStoreTimeout(t *testing.T) {
	const budget = 300 * time.Millisecond
	e := newAPIEnv(t, apitest.WithStoreTimeout(budget))
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "msg first")
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))
	st.Close()

	other, err := sqlite.Open(e.DBPath)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	release, err := other.HoldWrites(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if release != nil {
			release()
		}
	}()
	send, _ := json.Marshal(wire.SendRequest{Text: "msg second"})
	create, _ := json.Marshal(wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}, Prompt: "msg x"})
	tok, _ := json.Marshal(wire.TokenRequest{Name: "carol"})
	for _, c := range []struct {
		method, path, token string
		body                []byte
	}{
		{http.MethodPost, "/v1/sessions/" + v.ID + "/messages", e.Alice, send},
		{http.MethodPost, "/v1/sessions", e.Alice, create},
		{http.MethodPost, "/v1/tokens", e.Admin, tok},
	} {
		start := time.Now()
		status, info, h := doKeyed(t, e, c.method, c.path, c.token, c.body, "key-1")
		took := time.Since(start)
		t.Logf("%s %s, the database locked: %d after %s: %s", c.method, c.path, status, took.Round(time.Millisecond), info.Message)
		if status != http.StatusServiceUnavailable || info.Code != wire.CodeUnavailable || h.Get("Retry-After") == "" {
			t.Errorf("%s %s, the database locked: %d %s (Retry-After %q), want 503 unavailable with Retry-After", c.method, c.path, status, info.Code, h.Get("Retry-After"))
		}
		if !strings.Contains(info.Message, "does not answer") {
			t.Errorf("%s %s: the message does not say the database does not answer: %s", c.method, c.path, info.Message)
		}
		if took > budget+time.Second {
			t.Errorf("%s %s answered after %s; the store budget is %s", c.method, c.path, took, budget)
		}
	}
	if _, err := e.AliceC.GetSession(ctx, v.ID); err != nil {
		t.Errorf("a read, the database locked for writes: %v", err)
	}

	err = release()
	release = nil
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.AliceC.SendOnce(ctx, v.ID, "key-1", "msg second", "")
	if err != nil {
		t.Fatalf("the send's retry with its key, the lock released: %v", err)
	}
	msgs, err := e.Store.Messages(context.Background(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range msgs {
		if x.Key == "key-1" {
			n++
			if x.ID != m.ID {
				t.Errorf("the retry got message %s, the store has %s", m.ID, x.ID)
			}
		}
	}
	if n != 1 {
		t.Errorf("the message sent with key-1 is stored %d times, want once", n)
	}
}

// doKeyed sends one JSON request with an Idempotency-Key and returns its
// status, error and headers.
func doKeyed(t *testing.T, e *apiEnv, method, path, token string, body []byte, key string) (int, server.ErrorInfo, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(testbin.Context(t), method, e.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := e.Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb server.ErrorBody
	if resp.StatusCode >= 400 {
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			t.Errorf("%s %s: %d with a body that is not the error envelope: %v", method, path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, eb.Error, resp.Header
}
