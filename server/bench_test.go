package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// reportPercentiles reports p50 and p99 of ds in milliseconds.
func reportPercentiles(b *testing.B, ds []time.Duration, unit string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(p * float64(len(ds)-1))
		return float64(ds[i].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-"+unit)
	b.ReportMetric(at(0.99), "p99-"+unit)
	b.ReportMetric(at(1), "max-"+unit)
}

// BenchmarkSSELatency: from journal.Append of an event to the client
// reading it from the SSE stream over loopback HTTP: the commit to SQLite
// (fsync included), the fan-out, the handler's write and flush, the
// client's parse. One event at a time, so each is measured alone.
//
//	go test -run '^$' -bench SSELatency -benchtime 2000x ./server/
func BenchmarkSSELatency(b *testing.B) {
	e := newAPIEnv(b)
	v := e.create(e.AliceC, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(b, st, "idle", stacktest.IsState(store.StateIdle))
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		seq, err := e.Journal.Append(event.Event{Session: v.ID, Data: event.SessionState{State: "idle", Reason: "latency probe"}})
		if err != nil {
			b.Fatal(err)
		}
		for {
			ev, err := st.Next()
			if err != nil {
				b.Fatal(err)
			}
			if ev.Seq == seq {
				break
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, lat, "ms")
}

// BenchmarkCreateToFirstModelRequest: from POST /v1/sessions (a one-file
// repository, a prompt) to harvest sim receiving the agent's first model
// request: storing the session, copying the repository, starting a local
// box (from the backend's pool of ready shims, as harvest serve runs it),
// loading the agent, and the request. The session is deleted between
// iterations, off the clock.
//
//	go test -run '^$' -bench CreateToFirstModelRequest -benchtime 30x ./server/
func BenchmarkCreateToFirstModelRequest(b *testing.B) {
	e := newAPIEnv(b, apitest.WithStack(stacktest.WithPool(2)), apitest.WithSimHits)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		v, err := e.AliceC.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}, Prompt: "msg hi"})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-e.SimHits:
		case <-time.After(stacktest.WaitTimeout):
			b.Fatal("no model request")
		}
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
		stacktest.ReadUntil(b, st, "the turn to end", stacktest.TurnEnded("t1"))
		st.Close()
		if err := e.AliceC.DeleteSession(ctx, v.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, lat, "ms")
}

// BenchmarkListPageHTTP: a page of GET /v1/sessions through a real server
// over loopback HTTP, with 10,000 suspended sessions in its store (SQLite):
// the query, the conversion and the JSON, the client's decode (issue 23:
// ≤ 100 ms a page).
//
//	go test -run '^$' -bench ListPageHTTP -benchtime 20x ./server/
func BenchmarkListPageHTTP(b *testing.B) {
	e := newAPIEnv(b)
	ctx := context.Background()
	t0 := time.Now().Add(-24 * time.Hour).UTC()
	for i := range 10000 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		s := &store.Session{ID: fmt.Sprintf("s-bench%06d", i), Owner: e.AliceID, State: store.StateSuspended, Title: "a suspended session",
			Agent: "builtin", Model: "anthropic/claude-sonnet-4-5", Backend: "local", CreatedAt: at, UpdatedAt: at,
			Repos: []store.Repo{{Name: "repo", Source: "/src/repo", Origin: "/src/repo", Path: "/data/workspaces/session/s-bench/repo"}}}
		if err := e.Store.CreateSession(ctx, s, nil); err != nil {
			b.Fatal(err)
		}
	}
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			p, err := e.AliceC.ListSessionsPage(ctx, client.ListOptions{Limit: size})
			if err != nil || p.NextCursor == "" {
				b.Fatal(p, err)
			}
			mid := p.NextCursor
			for b.Loop() {
				q, err := e.AliceC.ListSessionsPage(ctx, client.ListOptions{Limit: size, Cursor: mid})
				if err != nil || len(q.Sessions) != size {
					b.Fatal(err)
				}
			}
		})
	}
}
