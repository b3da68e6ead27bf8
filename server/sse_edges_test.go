package server_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
)

// TestSSEPastLastSeqIsRefused: a Last-Event-ID or since beyond the
// session's newest event is a 400 naming the newest seq (the client has
// events this server never stored and would wait forever for the next
// one); at the newest seq the stream opens.
func TestSSEPastLastSeqIsRefused(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "")
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	stacktest.ReadUntil(t, st, "the session to be idle", stacktest.IsState(store.StateIdle))
	st.Close()
	if err := e.Journal.Flush(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	last, err := e.Store.LastSeq(ctx, v.ID)
	if err != nil || last < 1 {
		t.Fatalf("last seq %d, %v", last, err)
	}
	ahead := strconv.FormatInt(last+1, 10)
	for _, c := range []struct {
		header http.Header
		query  string
		name   string
	}{
		{http.Header{"Last-Event-ID": {ahead}}, "", "Last-Event-ID " + ahead},
		{nil, "since=" + strconv.FormatInt(last+100, 10), "since " + strconv.FormatInt(last+100, 10)},
		// The header wins over since, as the doc says, also here.
		{http.Header{"Last-Event-ID": {ahead}}, "since=0", "Last-Event-ID " + ahead},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/v1/sessions/"+v.ID+"/events?"+c.query, nil)
		for k, vs := range c.header {
			req.Header[k] = vs
		}
		req.Header.Set("Authorization", "Bearer "+e.Alice)
		resp, err := e.Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb server.ErrorBody
		json.Unmarshal(b, &eb)
		lastStr := strconv.FormatInt(last, 10)
		if resp.StatusCode != http.StatusBadRequest || eb.Error.Code != server.CodeBadRequest ||
			!strings.Contains(eb.Error.Message, c.name+" is past the session's last event, "+lastStr) ||
			!strings.Contains(eb.Error.Message, "or less") {
			t.Errorf("%v %q: %d %s; want 400 naming %s and last seq %s", c.header, c.query, resp.StatusCode, b, c.name, lastStr)
		}
	}
	// At the newest seq: a stream (that waits for what comes next).
	raw := e.openRaw(e.Alice, v.ID, http.Header{"Last-Event-ID": {strconv.FormatInt(last, 10)}}, "")
	raw.close()

	// The client gives up at once with the 400 (no reconnect loop).
	st = e.AliceC.Events(ctx, v.ID, client.StreamOptions{After: last + 5})
	defer st.Close()
	_, err = st.Next()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || !strings.Contains(ce.Message, strconv.FormatInt(last, 10)) {
		t.Errorf("client stream after %d: %v, want a 400 naming %d", last+5, err, last)
	}
	if st.Reconnects() != 0 {
		t.Errorf("the client reconnected %d times on a 400", st.Reconnects())
	}
}

// TestSSEDeletedSessionEndsWithStreamError: deleting a session ends its
// open streams with the final event, named stream.error (not error, which
// EventSource keeps for its own connection errors), code deleted, no id.
func TestSSEDeletedSessionEndsWithStreamError(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "")
	raw := e.openRaw(e.Alice, v.ID, nil, "")
	if _, err := raw.next(); err != nil {
		t.Fatal(err)
	}
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "the session to be idle", stacktest.IsState(store.StateIdle))
	if err := e.AliceC.DeleteSession(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	var end sseEvent
	for {
		ev, err := raw.next()
		if err != nil {
			t.Fatalf("the stream of a deleted session ended without a final event: %v", err)
		}
		if ev.typ != "" && ev.id == "" {
			end = ev
			break
		}
	}
	var eb server.ErrorBody
	if err := json.Unmarshal([]byte(end.data), &eb); err != nil || end.typ != "stream.error" || eb.Error.Code != server.StreamDeleted || eb.Error.Message == "" {
		t.Errorf("the final event: event %q data %s", end.typ, end.data)
	}
	if _, err := raw.next(); err != io.EOF && err != io.ErrUnexpectedEOF {
		t.Errorf("after the final event: %v, want the end of the stream", err)
	}
	// The Go client reads it as the end of the session: a 404, not a retry.
	for {
		_, err := st.Next()
		if err == nil {
			continue
		}
		if !client.IsNotFound(err) {
			t.Errorf("the client's stream after the delete: %v, want a 404", err)
		}
		break
	}
}

// TestInvalidCreateListsEveryProblem: details lists every problem of a
// request, those of the request's shape and those only the session layer
// can see (a backend it does not have) together; lengths are characters,
// as openapi.json's maxLength; durations go out as strings like "10m".
func TestInvalidCreateListsEveryProblem(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	repos := strings.Repeat(`{"source":`+strconv.Quote(e.Repo)+`},`, 17)
	body := `{"title":"` + strings.Repeat("é", 201) + `","repos":[` + strings.TrimSuffix(repos, ",") + `],` +
		`"mode":"later","backend":"nope","limits":{"max_steps":-1},"terminal":{"command":["sh"],"done_pattern":"` + strings.Repeat("é", 1025) + `"}}`
	status, info, _ := e.doRaw(http.MethodPost, "/v1/sessions", "Bearer "+e.Alice, "application/json", []byte(body))
	want := []string{"title is 201 characters: at most 200", "repos has 17 repositories: at most 16", `mode "later"`, "max_steps", "backend:", "terminal.done_pattern is 1025 characters: at most 1024"}
	if status != http.StatusBadRequest || info.Code != server.CodeInvalid {
		t.Fatalf("%d %+v, want 400 invalid", status, info)
	}
	for _, w := range want {
		found := false
		for _, d := range info.Details {
			found = found || strings.Contains(d, w)
		}
		if !found {
			t.Errorf("details do not say %q:\n  %s", w, strings.Join(info.Details, "\n  "))
		}
	}
	if !strings.Contains(info.Message, strconv.Itoa(len(info.Details))+" problems") {
		t.Errorf("message %q does not count the %d problems", info.Message, len(info.Details))
	}

	// At the bounds, in characters of two bytes each: accepted. The
	// durations come back as the strings openapi.json documents.
	title := strings.Repeat("é", 200)
	b := `{"title":"` + title + `","repos":[{"source":` + strconv.Quote(e.Repo) + `}],"limits":{"idle_timeout":"10m","max_lifetime":3600000000000}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/sessions", strings.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.Alice)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(got), `"idle_timeout":"10m"`) || !strings.Contains(string(got), `"max_lifetime":"1h"`) {
		t.Fatalf("a title of 200 characters (400 bytes): %s %s", resp.Status, got)
	}
	var v struct{ ID, Title string }
	json.Unmarshal(got, &v)
	if v.Title != title {
		t.Errorf("title came back as %q", v.Title)
	}
	if err := e.AliceC.DeleteSession(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
}
