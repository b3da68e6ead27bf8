package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// Bounds of the fields the server checks itself. The body of POST
// /v1/sessions is only decoded here: the session layer checks every field
// (Manager.Create), so one 400 lists every problem of a request.
const (
	maxLimit = 1000 // GET /v1/sessions?limit=, and the page size without one
	maxName  = 100  // token names, in characters

	// bodyTimeout bounds reading a request body.
	bodyTimeout = time.Minute
)

// readBody reads a request body of at most MaxBody bytes. An oversized
// body is a 413 whatever Content-Length said.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.Body == nil {
		return nil, nil
	}
	if r.ContentLength > MaxBody {
		return nil, tooLarge()
	}
	// A client that trickles its body does not hold the handler for long.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, errorf(http.StatusBadRequest, CodeBadRequest, "reading the request body: "+err.Error())
	}
	return b, nil
}

func tooLarge() *apiError {
	return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge,
		fmt.Sprintf("the request body is larger than %d bytes: send a shorter prompt or message", MaxBody))
}

// decodeBody decodes body, sent with contentType, into v: exactly one JSON
// object, no field v does not have. With required false an empty body is
// the zero value (endpoints that take no body accept none or {}). It does
// no I/O, so FuzzDecode* can call it directly.
func decodeBody(contentType string, body []byte, v any, required bool) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		if required {
			return errorf(http.StatusBadRequest, CodeBadRequest, "the request body is empty: send a JSON object (see /openapi.json)")
		}
		return nil
	}
	if e := checkContentType(contentType); e != nil {
		return e
	}
	if !utf8.Valid(body) {
		return errorf(http.StatusBadRequest, CodeBadRequest, "the request body is not valid UTF-8: send JSON text")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, v)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, CodeBadRequest, "the request body has more after its JSON object: send exactly one object")
	}
	return nil
}

// checkContentType accepts application/json, with or without parameters
// (charset=utf-8 is the only charset JSON has).
func checkContentType(ct string) *apiError {
	if ct == "" {
		return errorf(http.StatusUnsupportedMediaType, CodeMediaType, "the request has a body but no Content-Type: send it as application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, CodeMediaType, fmt.Sprintf("Content-Type %q: send the body as application/json", ct))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errorf(http.StatusUnsupportedMediaType, CodeMediaType, fmt.Sprintf("charset %q: JSON is UTF-8", cs))
	}
	return nil
}

// jsonError says what was wrong with a JSON body, and where.
func jsonError(err error, v any) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	msg := err.Error()
	switch {
	case errors.As(err, &syn):
		msg = fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "malformed JSON: the body ends in the middle of a value"
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			msg = fmt.Sprintf("the body is a JSON %s: send a JSON object", typ.Value)
		} else {
			msg = fmt.Sprintf("field %q: got a JSON %s, want %s", field, typ.Value, jsonKind(typ.Type))
		}
	case strings.HasPrefix(msg, "json: unknown field "):
		name := strings.TrimPrefix(msg, "json: unknown field ")
		msg = fmt.Sprintf("unknown field %s: the accepted fields are %s", name, strings.Join(fieldNames(reflect.TypeOf(v)), ", "))
	case !strings.HasPrefix(msg, "json: "):
		// A type's own UnmarshalJSON said what is wrong (a duration).
	default:
		msg = "malformed JSON: " + strings.TrimPrefix(msg, "json: ")
	}
	return errorf(http.StatusBadRequest, CodeBadRequest, msg)
}

func jsonKind(t reflect.Type) string {
	if t == reflect.TypeOf(time.Duration(0)) {
		return `a duration ("5m") or integer nanoseconds`
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// fieldNames lists the JSON names of a struct's top-level fields.
func fieldNames(t reflect.Type) []string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// decodeCreate decodes the body of POST /v1/sessions. Its fields are
// checked by Manager.Create, all at once, so that details lists every
// problem (checks here would hide the session layer's behind their own).
func decodeCreate(contentType string, body []byte) (wire.CreateRequest, *apiError) {
	var req wire.CreateRequest
	if e := decodeBody(contentType, body, &req, true); e != nil {
		return req, e
	}
	return req, nil
}

// decodeSend decodes and checks the body of POST /v1/sessions/{id}/messages.
func decodeSend(contentType string, body []byte) (SendRequest, *apiError) {
	var req SendRequest
	if e := decodeBody(contentType, body, &req, true); e != nil {
		return req, e
	}
	var p []string
	if strings.TrimSpace(req.Text) == "" {
		p = append(p, `"text" is empty: say what the agent should do`)
	}
	if e := checkMode(req.Mode); e != "" {
		p = append(p, e)
	}
	if len(p) > 0 {
		return req, invalid(p)
	}
	return req, nil
}

// decodeToken decodes and checks the body of POST /v1/tokens.
func decodeToken(contentType string, body []byte) (TokenRequest, *apiError) {
	var req TokenRequest
	if e := decodeBody(contentType, body, &req, true); e != nil {
		return req, e
	}
	var p []string
	if strings.TrimSpace(req.Name) == "" {
		p = append(p, `"name" is empty: name the token after who uses it, like "ci" or "alice"`)
	}
	if n := utf8.RuneCountInString(req.Name); n > maxName {
		p = append(p, fmt.Sprintf(`"name" is %d characters: at most %d`, n, maxName))
	}
	if strings.ContainsFunc(req.Name, isControl) {
		p = append(p, `"name" has control characters: use printable ones`)
	}
	if err := CheckTokenName(req.Name); err != nil {
		p = append(p, `"name": `+err.Error())
	}
	if len(p) > 0 {
		return req, invalid(p)
	}
	return req, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func invalid(problems []string) *apiError {
	e := errorf(http.StatusBadRequest, CodeInvalid, (&session.InputError{Problems: problems}).Error())
	e.details = problems
	return e
}

func checkMode(m string) string {
	switch m {
	case "", session.ModeQueue, session.ModeInterrupt:
		return ""
	}
	return fmt.Sprintf(`"mode" %q: use %q (after the running turn) or %q (stop it and start this one)`, m, session.ModeQueue, session.ModeInterrupt)
}

// validTokenID is the shape of a token id (NewToken). Session ids are
// checked with session.ValidID. A path segment of any other shape names
// nothing, and is refused before it reaches the store.
func validTokenID(s string) bool {
	if len(s) != len("tok-")+12 || !strings.HasPrefix(s, "tok-") {
		return false
	}
	for _, c := range s[len("tok-"):] {
		if !(c >= 'a' && c <= 'f' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// parseSeq parses an event seq from Last-Event-ID or ?since=.
func parseSeq(what, s string) (int64, *apiError) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("%s %q: give the seq of the last event you have (a whole number, 0 for all)", what, s))
	}
	return n, nil
}

// listQuery is what GET /v1/sessions takes.
type listQuery struct {
	filter store.SessionFilter
	// owner was given (admins only).
	owner bool
	// scope is scopeMine or scopeVisible (server/access.go).
	scope string
}

// parseList parses the query of GET /v1/sessions: state (comma-separated,
// repeatable), limit (the page size: 1 to 1000, default 1000, what the list
// answered before it had pages), cursor (a page's next_cursor),
// updated_before (RFC 3339), scope (mine or visible: server/access.go),
// owner (admins).
func parseList(q map[string][]string) (listQuery, *apiError) {
	var lq listQuery
	for key, vals := range q {
		switch key {
		case "state":
			for _, v := range vals {
				for s := range strings.SplitSeq(v, ",") {
					st := store.State(strings.TrimSpace(s))
					if !knownState(st) {
						return lq, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("state %q: use one of %s", st, strings.Join(stateNames(), ", ")))
					}
					if !slices.Contains(lq.filter.States, st) {
						lq.filter.States = append(lq.filter.States, st)
					}
				}
			}
		case "limit":
			n, err := strconv.Atoi(vals[len(vals)-1])
			if err != nil || n < 1 || n > maxLimit {
				return lq, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("limit %q: give a whole number from 1 to %d", vals[len(vals)-1], maxLimit))
			}
			lq.filter.Limit = n
		case "updated_before":
			t, err := time.Parse(time.RFC3339Nano, vals[len(vals)-1])
			if err != nil {
				return lq, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("updated_before %q: give a time in RFC 3339, like 2025-01-02T15:04:05Z", vals[len(vals)-1]))
			}
			lq.filter.UpdatedBefore = t
		case "cursor":
			k, err := parseCursor(vals[len(vals)-1])
			if err != nil {
				return lq, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("cursor %q: %v; pass back the next_cursor of a page as it is, or leave cursor out for the first page", clip(vals[len(vals)-1], 80), err))
			}
			lq.filter.After = k
		case "scope":
			switch v := vals[len(vals)-1]; v {
			case scopeMine, scopeVisible:
				lq.scope = v
			default:
				return lq, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("scope %q: give mine (your own sessions) or visible (all you may read, the default)", clip(v, 40)))
			}
		case "owner":
			o := vals[len(vals)-1]
			if !validTokenID(o) {
				return lq, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("owner %q: give a token id (harvest token ls)", o))
			}
			lq.filter.Owner, lq.owner = o, true
		default:
			return lq, errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET /v1/sessions takes state, limit, cursor, updated_before, scope and owner", key))
		}
	}
	if lq.filter.Limit == 0 {
		lq.filter.Limit = maxLimit
	}
	if lq.scope == "" {
		lq.scope = scopeVisible
	}
	return lq, nil
}

var allStates = []store.State{
	store.StatePending, store.StateProvisioning, store.StateIdle, store.StateWorking, store.StateWaiting,
	store.StateCancelling, store.StateSuspended, store.StateStopped, store.StateFailed,
}

func knownState(s store.State) bool { return slices.Contains(allStates, s) }

func stateNames() []string {
	out := make([]string, len(allStates))
	for i, s := range allStates {
		out[i] = string(s)
	}
	return out
}
