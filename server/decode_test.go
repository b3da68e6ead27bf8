package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/wire"
)

const ctJSON = "application/json"

// TestDecodeRejects: each malformed body gets the status and a message that
// says what is wrong.
func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name, ct, body string
		status         int
		want           string
	}{
		{"empty", ctJSON, "", 400, "the request body is empty"},
		{"spaces", ctJSON, "  \n", 400, "the request body is empty"},
		{"no content type", "", `{"repos":[{"source":"/x"}]}`, 415, "no Content-Type"},
		{"text/plain", "text/plain", `{"repos":[{"source":"/x"}]}`, 415, `Content-Type "text/plain"`},
		{"latin1", "application/json; charset=latin1", `{"repos":[{"source":"/x"}]}`, 415, `charset "latin1"`},
		{"truncated", ctJSON, `{"repos":[{"source":"/x"}`, 400, "malformed JSON: the body ends in the middle"},
		{"syntax", ctJSON, `{"repos":[{"source":"/x"},]}`, 400, "malformed JSON at byte 27: invalid character ']' looking for beginning of value"},
		{"not an object", ctJSON, `[1,2]`, 400, "the body is a JSON array: send a JSON object"},
		{"string", ctJSON, `"hi"`, 400, "the body is a JSON string"},
		{"unknown field", ctJSON, `{"repos":[{"source":"/x"}],"promt":"hi"}`, 400, `unknown field "promt": the accepted fields are agent, backend, collaboration, egress, limits, mcp_servers, mode, model, pr, prompt, repos, terminal, title, workflow`},
		{"unknown nested field", ctJSON, `{"repos":[{"source":"/x","branch":"main"}]}`, 400, `unknown field "branch"`},
		{"unknown limit", ctJSON, `{"repos":[{"source":"/x"}],"limits":{"idle":5}}`, 400, `unknown field "idle"`},
		{"wrong type", ctJSON, `{"repos":"/x"}`, 400, `field "repos": got a JSON string, want an array`},
		{"bad duration", ctJSON, `{"repos":[{"source":"/x"}],"limits":{"idle_timeout":"soon"}}`, 400, `idle_timeout "soon" is not a duration: write it like "90s"`},
		{"duration of another type", ctJSON, `{"repos":[{"source":"/x"}],"limits":{"idle_timeout":true}}`, 400, `idle_timeout: got true; want a duration like "5m" or integer nanoseconds`},
		{"two objects", ctJSON, `{"repos":[{"source":"/x"}]} {}`, 400, "more after its JSON object"},
		{"trailing garbage", ctJSON, `{"repos":[{"source":"/x"}]}x`, 400, "more after its JSON object"},
		{"not utf-8", ctJSON, "{\"repos\":[{\"source\":\"\xff\"}]}", 400, "not valid UTF-8"},
	}
	for _, c := range cases {
		_, e := decodeCreate(c.ct, []byte(c.body))
		if e == nil {
			t.Errorf("%s: accepted %q", c.name, c.body)
			continue
		}
		if e.status != c.status || !strings.Contains(e.message, c.want) {
			t.Errorf("%s: %d %q\n  want %d and a message containing %q", c.name, e.status, e.message, c.status, c.want)
		}
	}

	// The fields themselves are the session layer's to check (all at
	// once: TestInvalidCreateListsEveryProblem); decoding accepts them.
	if _, e := decodeCreate(ctJSON, []byte(`{"repos":[{"source":""}],"mode":"x","limits":{"budget_usd":-1}}`)); e != nil {
		t.Errorf("decoding a well-formed but invalid request: %v", e)
	}

	for body, want := range map[string]string{
		`{"text":""}`:                      `"text" is empty`,
		`{"text":"hi","mode":"later"}`:     `"mode" "later"`,
		`{"text":"hi","model":"x"}`:        `unknown field "model": the accepted fields are mode, text`,
		`{"text":1}`:                       `field "text": got a JSON number, want a string`,
		`{"text":"a"}{"text":"b"}`:         "more after its JSON object",
		`{"text":"hi","mode":"interrupt"}`: "",
	} {
		_, e := decodeSend(ctJSON, []byte(body))
		switch {
		case want == "" && e != nil:
			t.Errorf("send %s: %v", body, e)
		case want != "" && (e == nil || e.status != 400 || !strings.Contains(e.message, want)):
			t.Errorf("send %s: %v, want 400 %q", body, e, want)
		}
	}

	for body, want := range map[string]string{
		`{"name":""}`:                                  `"name" is empty`,
		`{"name":"ci","admin":"yes"}`:                  `field "admin": got a JSON string, want true or false`,
		`{"name":"a\u0000b"}`:                          "control characters",
		`{"name":"ci","scopes":["x"]}`:                 `unknown field "scopes"`,
		`{"name":"` + strings.Repeat("n", 101) + `"}`:  `"name" is 101 characters: at most 100`,
		`{"name":"` + strings.Repeat("é", 101) + `"}`:  `"name" is 101 characters: at most 100`,
		`{"name":"` + strings.Repeat(`\n`, 101) + `"}`: "3 problems",
	} {
		if _, e := decodeToken(ctJSON, []byte(body)); e == nil || e.status != 400 || !strings.Contains(e.message, want) {
			t.Errorf("token %s: %v, want 400 %q", body, e, want)
		}
	}
	// maxLength counts characters, as openapi.json says: 100 of them in
	// any script are a name (200 bytes of é here).
	if _, e := decodeToken(ctJSON, []byte(`{"name":"`+strings.Repeat("é", 100)+`"}`)); e != nil {
		t.Errorf("a name of 100 two-byte characters: %v", e)
	}

	// No body where none is taken: nothing, or {}; anything else is refused.
	var v struct{}
	for body, status := range map[string]int{"": 0, "{}": 0, " {} ": 0, `{"force":true}`: 400, "[]": 400, "x": 400} {
		e := decodeBody(ctJSON, []byte(body), &v, false)
		if (e == nil) != (status == 0) || (e != nil && e.status != status) {
			t.Errorf("no-body route, body %q: %v, want %d", body, e, status)
		}
	}
}

func TestDecodeAccepts(t *testing.T) {
	req, e := decodeCreate("application/json; charset=UTF-8", []byte(`{
		"title": "fix it", "repos": [{"source": "/src/app", "name": "app", "ref": "main"}, {"source": "https://example.com/x.git"}],
		"prompt": "Fix the test", "agent": "builtin", "model": "anthropic/claude-sonnet-4-5", "backend": "local", "mode": "interrupt",
		"limits": {"idle_timeout": 60000000000, "max_steps": 5, "budget_usd": 1.5, "memory_bytes": 1073741824}}`))
	if e != nil {
		t.Fatal(e)
	}
	if len(req.Repos) != 2 || req.Repos[0].Ref != "main" || req.Limits.MaxSteps != 5 || req.Limits.IdleTimeout.Minutes() != 1 || req.Mode != "interrupt" {
		t.Errorf("%+v", req)
	}
}

func TestParseQueries(t *testing.T) {
	for q, want := range map[string]string{
		"state=idle,working&limit=5":                                 "",
		"state=idle&state=idle":                                      "",
		"updated_before=2025-01-02T15:04:05Z&owner=tok-0123456789ab": "",
		"state=sleeping":                                             `state "sleeping": use one of pending, provisioning`,
		"limit=0":                                                    `limit "0": give a whole number from 1 to 1000`,
		"limit=1001":                                                 "from 1 to 1000",
		"limit=x":                                                    "from 1 to 1000",
		"updated_before=yesterday":                                   `updated_before "yesterday": give a time in RFC 3339`,
		"owner=../x":                                                 `owner "../x": give a token id`,
		"sort=name":                                                  `unknown query parameter "sort"`,
	} {
		vals, _ := url.ParseQuery(q)
		lq, e := parseList(vals)
		switch {
		case want == "" && e != nil:
			t.Errorf("%s: %v", q, e)
		case want != "" && (e == nil || e.status != 400 || !strings.Contains(e.message, want)):
			t.Errorf("%s: %v, want 400 %q", q, e, want)
		case want == "" && q == "state=idle&state=idle" && len(lq.filter.States) != 1:
			t.Errorf("%s: %v", q, lq.filter.States)
		}
	}
	for s, ok := range map[string]bool{"0": true, "42": true, " 7 ": true, "-1": false, "x": false, "1e3": false, "99999999999999999999": false} {
		if _, e := parseSeq("since", s); (e == nil) != ok {
			t.Errorf("seq %q: %v", s, e)
		}
	}
}

// The fuzz targets: whatever the bytes, a decoder either accepts a value
// that passes its own checks again after a round trip through JSON, or
// refuses with a 4xx the envelope can carry. Never a panic, never a 5xx.
// `go test` runs the seed corpus; `go test -fuzz FuzzDecodeCreate` explores.

func checkRefusal(t *testing.T, e *apiError) {
	t.Helper()
	if e.status < 400 || e.status > 499 || e.code == "" || e.message == "" {
		t.Fatalf("refusal %d %q %q", e.status, e.code, e.message)
	}
	if _, err := json.Marshal(ErrorBody{Error: ErrorInfo{Code: e.code, Message: e.message, Details: e.details}}); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{
		`{"repos":[{"source":"/x"}]}`,
		`{"repos":[{"source":"/x","name":"a","ref":"main"}],"prompt":"p","mode":"queue","limits":{"idle_timeout":1,"budget_usd":0.5}}`,
		`{"repos":[]}`, `{}`, `[]`, `null`, `"x"`, `{"repos":[{"source":"/x"}]}{}`, `{"repos":[{"source":"/x","extra":1}]}`,
		`{"title":"\u0000","repos":[{"source":"\ud800"}]}`, `{"limits":{"max_steps":1e100}}`, "\xff", `{"repos":[{"source":"/x"}],"limits":null}`,
	} {
		f.Add(ctJSON, []byte(s))
	}
	f.Add("text/plain", []byte(`{"repos":[{"source":"/x"}]}`))
	f.Add("application/json; charset=utf-16", []byte(`{}`))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		req, e := decodeCreate(ct, body)
		if e != nil {
			checkRefusal(t, e)
			return
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, e := decodeCreate(ctJSON, b)
		if e != nil {
			t.Fatalf("accepted %q, but not its own re-encoding %s: %v", body, b, e)
		}
		if !reflect.DeepEqual(normalize(req), normalize(again)) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, again)
		}
	})
}

// normalize makes nil and empty slices equal (omitempty drops both).
func normalize(r wire.CreateRequest) wire.CreateRequest {
	if len(r.Repos) == 0 {
		r.Repos = nil
	}
	return r
}

func FuzzDecodeSend(f *testing.F) {
	for _, s := range []string{`{"text":"hi"}`, `{"text":"hi","mode":"interrupt"}`, `{"text":""}`, `{"text":"hi","x":1}`, `{"text":null}`, `{"text":"a"} `, `{`} {
		f.Add(ctJSON, []byte(s))
	}
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		req, e := decodeSend(ct, body)
		if e != nil {
			checkRefusal(t, e)
			return
		}
		if strings.TrimSpace(req.Text) == "" || checkMode(req.Mode) != "" {
			t.Fatalf("accepted an invalid message %+v", req)
		}
		b, _ := json.Marshal(req)
		if again, e := decodeSend(ctJSON, b); e != nil || again != req {
			t.Fatalf("round trip: %+v %v", again, e)
		}
	})
}

func FuzzDecodeToken(f *testing.F) {
	for _, s := range []string{`{"name":"ci"}`, `{"name":"root","admin":true}`, `{"name":""}`, `{"admin":1}`} {
		f.Add(ctJSON, []byte(s))
	}
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		req, e := decodeToken(ct, body)
		if e != nil {
			checkRefusal(t, e)
			return
		}
		b, _ := json.Marshal(req)
		if again, e := decodeToken(ctJSON, b); e != nil || again != req {
			t.Fatalf("round trip: %+v %v", again, e)
		}
	})
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"state=idle", "state=idle,working&limit=10", "limit=-1", "updated_before=2025-01-01T00:00:00Z", "owner=tok-0123456789ab", "x=1", "state=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		vals, err := url.ParseQuery(q)
		if err != nil {
			return // net/http would refuse it before us
		}
		lq, e := parseList(vals)
		if e != nil {
			checkRefusal(t, e)
			return
		}
		if lq.filter.Limit < 1 || lq.filter.Limit > maxLimit {
			t.Fatalf("limit %d", lq.filter.Limit)
		}
		for _, s := range lq.filter.States {
			if !knownState(s) {
				t.Fatalf("state %q", s)
			}
		}
		if lq.owner && !validTokenID(lq.filter.Owner) {
			t.Fatalf("owner %q", lq.filter.Owner)
		}
	})
}

func FuzzParseSeq(f *testing.F) {
	for _, s := range []string{"0", "17", "-1", "", " 5", "9223372036854775807", "9223372036854775808", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, e := parseSeq("Last-Event-ID", s)
		if e != nil {
			checkRefusal(t, e)
			if e.status != http.StatusBadRequest {
				t.Fatal(e.status)
			}
			return
		}
		if n < 0 {
			t.Fatalf("%q → %d", s, n)
		}
	})
}
