package llmtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/sim"
)

// The failure half of the suite: retries and what is never retried,
// cancellation, per-attempt timeouts.

func testRetryAfter(t *testing.T, b Backend) {
	for _, tc := range []struct {
		status int
		kind   llm.Kind
	}{
		{429, llm.ErrRateLimited},
		{529, llm.ErrOverloaded},
		{500, llm.ErrServer},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			s := StartSim(t, fmt.Sprintf(`
mode: sequence
rules:
  - {name: fail1, reply: {error: {status: %[1]d, retry_after: 1500ms}}}
  - {name: fail2, reply: {error: {status: %[1]d, retry_after: 1500ms}}}
  - {name: ok, reply: {text: "recovered after two failures"}}
`, tc.status))
			c, sleeps := Client(t, b, s)
			var calls Calls
			c.Observer = &calls
			var retries []llm.RetryInfo
			c.Retry.OnRetry = func(r llm.RetryInfo) { retries = append(retries, r) }
			var ev Events
			resp, err := c.Stream(context.Background(), request("hi"), ev.Add)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Text() != "recovered after two failures" || ev.Text(0) != resp.Message.Text() {
				t.Errorf("got %q, streamed %q", resp.Message.Text(), ev.Text(0))
			}
			if got := sleeps.Delays(); len(got) != 2 || got[0] != 1500*time.Millisecond || got[1] != 1500*time.Millisecond {
				t.Errorf("slept %v, want the retry-after 1.5s twice", got)
			}
			for _, r := range retries {
				if r.Err.Kind != tc.kind || r.Err.Status != tc.status || r.Err.RetryAfter != 1500*time.Millisecond || !errors.Is(r.Err, tc.kind) {
					t.Errorf("retry %d: %v (kind %v, status %d, retry-after %s), want %v", r.Attempt, r.Err, r.Err.Kind, r.Err.Status, r.Err.RetryAfter, tc.kind)
				}
			}
			if len(retries) != 2 {
				t.Errorf("%d retries reported, want 2", len(retries))
			}
			// One call for the observer, with its three attempts.
			if call := calls.Only(t); call.Err != nil || call.Attempts != 3 || call.Model != b.Model || call.Provider != c.Provider.Name() || call.Usage.OutputTokens == 0 || call.Duration <= 0 {
				t.Errorf("the observer heard %+v: want a success after 3 attempts, with usage", call)
			}
			if got := Statuses(s.Log()); fmt.Sprint(got) != fmt.Sprint([]int{tc.status, tc.status, 200}) {
				t.Errorf("sim saw statuses %v", got)
			}
		})
	}
}

func testRetryExhausted(t *testing.T, b Backend) {
	s := StartSim(t, `
rules:
  - {name: down, reply: {error: {status: 500, message: "the backend is down"}}}
`)
	c, sleeps := Client(t, b, s)
	var calls Calls
	c.Observer = &calls
	c.Retry.MaxAttempts = 3
	_, err := c.Complete(context.Background(), request("hi"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrServer || e.Attempts != 3 || e.Status != 500 {
		t.Fatalf("err %v, want ErrServer after 3 attempts", err)
	}
	if call := calls.Only(t); !errors.Is(call.Err, llm.ErrServer) || call.Attempts != 3 || call.Usage != (llm.Usage{}) || call.CostUSD != 0 {
		t.Errorf("the observer heard %+v: want the ErrServer after 3 attempts, no usage", call)
	}
	if !strings.Contains(err.Error(), "the backend is down") || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Errorf("error %q does not say what happened", err)
	}
	// Exponential backoff from BaseDelay (1ms), no retry-after, no jitter.
	if got := sleeps.Delays(); fmt.Sprint(got) != "[1ms 2ms]" {
		t.Errorf("slept %v, want [1ms 2ms]", got)
	}
	if n := len(s.Log()); n != 3 {
		t.Errorf("sim saw %d requests, want 3", n)
	}
}

func testRetryAfterTooLong(t *testing.T, b Backend) {
	s := StartSim(t, `
rules:
  - {name: slow-down, reply: {error: {status: 429, message: "slow down", retry_after: 2m}}}
`)
	c, sleeps := Client(t, b, s)
	_, err := c.Complete(context.Background(), request("hi"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrRateLimited || e.RetryAfter != 2*time.Minute || e.Attempts != 1 {
		t.Fatalf("err %v, want ErrRateLimited with RetryAfter 2m after 1 attempt", err)
	}
	if !strings.Contains(err.Error(), "asked to wait 2m0s") {
		t.Errorf("error %q does not say how long to wait", err)
	}
	if len(sleeps.Delays()) != 0 || len(s.Log()) != 1 {
		t.Errorf("slept %v and sent %d requests; a retry-after beyond MaxRetryAfter is not retried", sleeps.Delays(), len(s.Log()))
	}
}

func testNoRetry(t *testing.T, b Backend) {
	tooLong := "prompt is too long: 250000 tokens > 200000 maximum"
	if b.API == sim.APIOpenAI {
		tooLong = "This model's maximum context length is 128000 tokens. However, your messages resulted in 250000 tokens."
	}
	for _, tc := range []struct {
		name, reply string
		kind        llm.Kind
		status      int
		message     string
	}{
		{"400", `{status: 400, message: "messages.0.content: bad block"}`, llm.ErrBadRequest, 400, "bad block"},
		{"401", `{status: 401, message: "invalid x-api-key"}`, llm.ErrAuth, 401, "invalid x-api-key"},
		{"403", `{status: 403}`, llm.ErrAuth, 403, ""},
		{"404", `{status: 404, message: "model: no-such-model"}`, llm.ErrBadRequest, 404, "no-such-model"},
		{"context", fmt.Sprintf(`{status: 400, message: %q}`, tooLong), llm.ErrContextTooLong, 400, "250000 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := StartSim(t, fmt.Sprintf("rules:\n  - {name: fail, reply: {error: %s}}\n", tc.reply))
			c, sleeps := Client(t, b, s)
			_, err := c.Complete(context.Background(), request("hi"))
			var e *llm.Error
			if !errors.As(err, &e) || e.Kind != tc.kind || !errors.Is(err, tc.kind) || e.Status != tc.status {
				t.Fatalf("err %v, want %v with status %d", err, tc.kind, tc.status)
			}
			if !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), b.New(t, s.URL).Name()) {
				t.Errorf("error %q does not carry the provider and its message %q", err, tc.message)
			}
			if e.Kind.Retryable() || len(sleeps.Delays()) != 0 || len(s.Log()) != 1 || e.Attempts != 1 {
				t.Errorf("retried a %v: slept %v, %d requests", tc.kind, sleeps.Delays(), len(s.Log()))
			}
		})
	}
}

func testCancelMidStream(t *testing.T, b Backend) {
	s := StartSim(t, fmt.Sprintf(`
rules:
  - name: slow
    reply: {text: %q, chunk_delay: 100ms}
`, LongText))
	c, _ := Client(t, b, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var canceled time.Time
	var ev Events
	_, err := c.Stream(ctx, request("talk slowly"), func(e llm.Event) {
		ev.Add(e)
		if isText(e) && canceled.IsZero() {
			canceled = time.Now()
			cancel()
		}
	})
	took := time.Since(canceled)
	if !errors.Is(err, llm.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want ErrCanceled wrapping context.Canceled", err)
	}
	// The whole reply takes ~6s to stream; cancellation must not wait for it.
	if took > 2*time.Second {
		t.Errorf("returned %s after cancel", took)
	}
	if n := ev.Count(isText); n != 1 {
		t.Errorf("%d text deltas delivered; none may follow the cancel", n)
	}
	if n := len(s.Log()); n != 1 {
		t.Errorf("sim saw %d requests; a cancelled call is not retried", n)
	}
}

func testCancelDuringBackoff(t *testing.T, b Backend) {
	s := StartSim(t, `
rules:
  - {name: busy, reply: {error: {status: 529, retry_after: 30s}}}
`)
	c, _ := Client(t, b, s)
	c.Retry.Sleep = nil // a real timer: cancellation must interrupt it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var canceled time.Time
	c.Retry.OnRetry = func(r llm.RetryInfo) {
		if r.Delay != 30*time.Second {
			t.Errorf("retry delay %s, want the retry-after 30s", r.Delay)
		}
		canceled = time.Now()
		cancel()
	}
	_, err := c.Complete(ctx, request("hi"))
	if took := time.Since(canceled); canceled.IsZero() || took > 2*time.Second {
		t.Errorf("returned %s after cancel (retried: %v)", took, !canceled.IsZero())
	}
	if !errors.Is(err, llm.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want ErrCanceled", err)
	}
	if n := len(s.Log()); n != 1 {
		t.Errorf("sim saw %d requests, want 1", n)
	}
}

func testTimeoutRetried(t *testing.T, b Backend) {
	s := StartSim(t, `
mode: sequence
rules:
  - {name: late, reply: {text: "too late", delay: 30s}}
  - {name: on-time, reply: {text: "on time"}}
`)
	c, sleeps := Client(t, b, s)
	var kinds []llm.Kind
	c.Retry.OnRetry = func(r llm.RetryInfo) { kinds = append(kinds, r.Err.Kind) }
	req := request("hi")
	req.Timeout = time.Second
	resp, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Text() != "on time" {
		t.Errorf("got %q", resp.Message.Text())
	}
	if fmt.Sprint(kinds) != fmt.Sprint([]llm.Kind{llm.ErrTimeout}) || len(sleeps.Delays()) != 1 {
		t.Errorf("retries %v, slept %v; want one retry after ErrTimeout", kinds, sleeps.Delays())
	}
	if log := s.Log(); len(log) != 2 || log[0].Rule != "late" || log[1].Rule != "on-time" {
		t.Errorf("sim log %+v", log)
	}
}

func testTimeoutNotRetried(t *testing.T, b Backend) {
	s := StartSim(t, fmt.Sprintf(`
rules:
  - {name: slow, reply: {text: %q, chunk_delay: 100ms}}
`, LongText))
	c, sleeps := Client(t, b, s)
	req := request("hi")
	req.Timeout = time.Second
	var ev Events
	_, err := c.Stream(context.Background(), req, ev.Add)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrTimeout || e.Attempts != 1 {
		t.Fatalf("err %v, want ErrTimeout after 1 attempt", err)
	}
	if !strings.Contains(err.Error(), "Request.Timeout (1s)") {
		t.Errorf("error %q does not name the limit", err)
	}
	if ev.Count(isText) == 0 {
		t.Errorf("no text streamed before the timeout")
	}
	if len(sleeps.Delays()) != 0 || len(s.Log()) != 1 {
		t.Errorf("retried after streaming: slept %v, %d requests", sleeps.Delays(), len(s.Log()))
	}
}
