// Package slackschema checks what the Slack stand-in (package slacksim)
// says against Slack's own published descriptions
// (github.com/slackapi/slack-api-specs), pinned in descriptions/ by
// ../internal/extract: the Web API methods the stand-in serves, with
// the definitions they use, from web-api/slack_web_openapi_v2_without_examples.json
// (Swagger 2.0), the Events API topics it delivers from
// events-api/slack_events_api_async_v1.json (AsyncAPI 1.2), and
// events-api/slack_common_event_wrapper_schema.json. SOURCE.json
// records the commit and the SHA-256 of each source file and of each
// pinned file, which Source checks.
//
// CheckExchanges checks a whole request log and envelope list at once,
// for any test that ran something against the stand-in.
//
// Schemas are validated with santhosh-tekuri/jsonschema (Swagger 2.0's
// schema objects are draft 4; the wrapper says draft 7), formats
// asserted ("url", which JSON Schema does not define, as "uri").
//
// # Where the description is loose or wrong
//
// Each is a rule below, with its evidence:
//
//   - apps.connections.open is not in the description at all (the
//     specs were last generated in 2021-09, and Socket Mode's method
//     never made it in): its answer is checked against the shape of its
//     method page, {"ok": true, "url": "wss://..."} (connectionsOpen).
//   - Alternatives are written {"items": [A, B]} without "type":
//     "array" (objs_user, objs_conversation, objs_message.bot_id,
//     objs_user.tz, ...): in JSON Schema that constrains nothing on an
//     object or a string, so every user or conversation would pass. The
//     generator meant "one of these": items[0] of objs_user is described
//     as "user object for non enterprise type", items[1] as "enterprise
//     user"; tz's are {"type": "null"} and {"type": "string"}. They are
//     rewritten as anyOf when loaded (anyOfItems).
//   - conversations.replies describes messages as a tuple whose first
//     item (the parent) forbids everything but a person's plain message
//     (no blocks, bot_id, reactions, edited) although the same
//     description's objs_message allows them and Slack returns them for
//     a bot's parent; and only the second item is described. Every
//     message is checked against objs_message instead. Its answer's
//     response_metadata (next_cursor, when has_more), which Slack's
//     pagination documentation says every cursor-paginated method
//     returns, is missing from the description (additionalProperties:
//     false); it is checked to be {"next_cursor": string} and removed
//     before the rest is validated.
//   - chat.update's answer describes message.blocks as an object; Slack
//     returns the message's blocks, an array, as chat.postMessage's
//     answer (objs_message, whose blocks are #/definitions/blocks, an
//     array) and every client (slack-go's Msg.Blocks, Bolt's types)
//     has them. They are checked against #/definitions/blocks, then
//     removed before the rest is validated (chatUpdate).
//   - Arguments Slack added after the description was generated are
//     accepted as described on their method pages: knownArgs.
//   - Error enums predate token types: not_allowed_token_type ("the
//     token type used in this request is not allowed", which Slack's
//     method pages now list for every method, and apps.connections.open
//     answers a bot token with) is accepted from every method
//     (commonErrors). Likewise invalid_blocks ("blocks submitted with
//     this message are not valid"), which chat.postMessage's,
//     chat.update's and chat.postEphemeral's pages list and their enums
//     lack.
//   - A 429 is not described (responses are 200 and default only), and
//     "ratelimited", what Slack answers with it, is in no method's error
//     enum (chat.postMessage lists "rate_limited"): a 429 is checked to
//     carry Retry-After and {"ok": false, "error": "ratelimited"}.
//   - Parameters are described "in: query" for GET methods and "in:
//     formData" for POST ones, but Slack takes every method's arguments
//     in the query, a form body or a JSON body (slack-go POSTs forms to
//     conversations.replies and users.info; views.open, described as GET,
//     is POSTed with JSON by every SDK): where they came from is not
//     checked, their names and types are.
//   - The "message" topic's payload was "Generated from
//     events/events-1512674163.json" (its description says so): one
//     recorded message_deleted event of a file comment. It requires
//     deleted_ts and previous_message, so it describes deletions, not
//     messages in general: new and edited messages are checked against
//     their channel type's topic (message.channels, message.groups,
//     message.im), whose payload is the generic wrapper. And its
//     previous_message requires that example's subtype, file and comment,
//     which the deletion of a plain message has not (Slack's
//     message_deleted page shows previous_message as {type, user, text,
//     ts}): that "required" is reduced to type, text and ts when loaded
//     (deletedMessage).
//   - views.open's answer is described as {"ok": true} and anything else
//     (additionalProperties: true, no view): the view the stand-in
//     returns is not checked by the description; slack-go's decoding of
//     it (ViewResponse) is its check.
//   - Interactive payloads (block_actions) and slash commands are in
//     none of the descriptions; the official clients' parsing (slack-go
//     and Bolt, in slacksim's tests) is their check.
package slackschema

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

//go:embed descriptions
var files embed.FS

// File is one pinned file, as SOURCE.json records it.
type File struct {
	Source       string   `json:"source"`
	SourceSHA256 string   `json:"source_sha256"`
	Pinned       string   `json:"pinned"`
	SHA256       string   `json:"sha256"`
	Kept         []string `json:"kept"`
	Missing      []string `json:"missing"`
}

// Sources is SOURCE.json.
type Sources struct {
	Repository string `json:"repository"`
	Commit     string `json:"commit"`
	Web        File   `json:"web"`
	Events     File   `json:"events"`
	Wrapper    File   `json:"wrapper"`
}

const (
	webBase     = "https://slackschema.test/web-api.json"
	eventsBase  = "https://slackschema.test/events-api.json"
	wrapperBase = "https://slackschema.test/event-wrapper.json"
)

var (
	loadOnce sync.Once
	loadErr  error
	src      Sources
	webDoc   map[string]any
	comp     *jsonschema.Compiler
	wrapper  *jsonschema.Schema

	schMu sync.Mutex
	sch   = map[string]*jsonschema.Schema{}
)

// Source reads SOURCE.json and checks each pinned file's SHA-256.
func Source() (Sources, error) {
	load()
	return src, loadErr
}

func load() {
	loadOnce.Do(func() { loadErr = doLoad() })
}

func doLoad() error {
	b, err := files.ReadFile("descriptions/SOURCE.json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &src); err != nil {
		return fmt.Errorf("SOURCE.json: %w", err)
	}
	comp = jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft4)
	comp.AssertFormat()
	comp.RegisterFormat(&jsonschema.Format{Name: "url", Validate: func(v any) error {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		if u, err := url.Parse(s); err != nil || u.Scheme == "" {
			return fmt.Errorf("not a URL: %q", s)
		}
		return nil
	}})
	for _, f := range []struct {
		file File
		base string
	}{{src.Web, webBase}, {src.Events, eventsBase}, {src.Wrapper, wrapperBase}} {
		raw, err := files.ReadFile("descriptions/" + f.file.Pinned)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		if got := hex.EncodeToString(sum[:]); got != f.file.SHA256 {
			return fmt.Errorf("%s: SHA-256 %s, SOURCE.json says %s: run internal/extract again", f.file.Pinned, got, f.file.SHA256)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("%s: %w", f.file.Pinned, err)
		}
		if f.base == webBase {
			doc = anyOfItems(doc)
			webDoc = doc.(map[string]any)
		}
		if f.base == eventsBase {
			if err := deletedMessage(doc); err != nil {
				return err
			}
		}
		if err := comp.AddResource(f.base, doc); err != nil {
			return err
		}
	}
	wrapper, err = comp.Compile(wrapperBase)
	return err
}

// anyOfItems rewrites {"items": [A, B, ...]} in a schema that is not an
// array's as {"anyOf": [A, B, ...]} (see the package doc).
func anyOfItems(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = anyOfItems(x)
		}
		if alts, ok := v["items"].([]any); ok && v["type"] != "array" {
			delete(v, "items")
			v["anyOf"] = alts
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = anyOfItems(x)
		}
	}
	return v
}

// deletedMessage relaxes the "message" topic's previous_message (see the
// package doc).
func deletedMessage(doc any) error {
	pm, ok := dig(doc, "topics", "message", "subscribe", "payload", "properties", "event", "properties", "previous_message").(map[string]any)
	if !ok {
		return fmt.Errorf("events-api.json: no message topic's previous_message")
	}
	pm["required"] = []any{"type", "text", "ts"}
	return nil
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func compile(ref string) (*jsonschema.Schema, error) {
	load()
	if loadErr != nil {
		return nil, loadErr
	}
	schMu.Lock()
	defer schMu.Unlock()
	if s, ok := sch[ref]; ok {
		return s, nil
	}
	s, err := comp.Compile(ref)
	if err != nil {
		return nil, err
	}
	sch[ref] = s
	return s, nil
}

func pointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// operation is a method's operation in the description.
func operation(method string) (verb string, op map[string]any, ok bool) {
	load()
	if loadErr != nil {
		return "", nil, false
	}
	p, _ := webDoc["paths"].(map[string]any)["/"+method].(map[string]any)
	for verb, o := range p {
		if m, ok := o.(map[string]any); ok {
			return verb, m, true
		}
	}
	return "", nil, false
}

// HasMethod reports whether the description has a method.
func HasMethod(method string) bool {
	_, _, ok := operation(method)
	return ok
}

// Methods is how many methods the pinned description holds.
func Methods() int {
	load()
	return len(webDoc["paths"].(map[string]any))
}

// ValidateParams checks a call's arguments against the method's
// parameters: the required ones present (the token may come in the
// Authorization header), none unknown, each of its type (a form's
// strings parsed; a JSON body's JSON-valued arguments, blocks and
// view, may be arrays or objects).
func ValidateParams(method string, params map[string]any, headerToken bool) error {
	_, op, ok := operation(method)
	if !ok {
		return fmt.Errorf("%s: not in the description", method)
	}
	described := map[string]map[string]any{}
	for _, p := range op["parameters"].([]any) {
		p := p.(map[string]any)
		described[p["name"].(string)] = p
	}
	var errs []string
	for name, p := range described {
		if req, _ := p["required"].(bool); req {
			if _, ok := params[name]; !ok && !(name == "token" && headerToken) {
				errs = append(errs, "missing required "+name)
			}
		}
	}
	for name, v := range params {
		p, ok := described[name]
		t := knownArgs[method+" "+name]
		if t == "" {
			t = knownArgs["* "+name]
		}
		if !ok && t != "" {
			if err := checkType(t, v); err != nil {
				errs = append(errs, name+": "+err.Error())
			}
			continue
		}
		if !ok {
			errs = append(errs, "unknown argument "+name)
			continue
		}
		if err := checkType(p["type"].(string), v); err != nil {
			errs = append(errs, name+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s arguments: %s", method, strings.Join(errs, "; "))
	}
	return nil
}

// knownArgs are arguments Slack takes that the description (generated
// 2021-09) lacks, each with its type as its method page gives it.
var knownArgs = map[string]string{
	// "include_all_metadata: Return all metadata associated with this
	// message" (boolean), added with message metadata in 2022; slack-go
	// v0.36 always sends it.
	"conversations.replies include_all_metadata": "boolean",
	// "team_id: encoded team id, required if org token is used", on the
	// pages of the methods an org-wide app calls; Bolt adds the event's
	// team to every call made with the client it hands a listener.
	"* team_id": "string",
}

func checkType(typ string, v any) error {
	s, isStr := v.(string)
	switch typ {
	case "string":
		switch v.(type) {
		case string, []any, map[string]any:
			return nil
		}
	case "boolean":
		if _, ok := v.(bool); ok {
			return nil
		}
		if isStr && (s == "true" || s == "false" || s == "1" || s == "0") {
			return nil
		}
	case "integer":
		if f, ok := v.(float64); ok && f == float64(int64(f)) {
			return nil
		}
		if _, err := strconv.ParseInt(s, 10, 64); isStr && err == nil {
			return nil
		}
	case "number":
		if _, ok := v.(float64); ok {
			return nil
		}
		if _, err := strconv.ParseFloat(s, 64); isStr && err == nil {
			return nil
		}
	}
	return fmt.Errorf("%v is not a %s", v, typ)
}

// ValidateResponse checks a method's answer: status 200 with ok true
// against the 200 schema, ok false against the default (error) one; a
// 429 as the package doc says.
func ValidateResponse(method string, status int, retryAfter int, body []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: answer is not JSON: %w", method, err)
	}
	obj, _ := inst.(map[string]any)
	if status == 429 {
		if retryAfter <= 0 || obj["ok"] != false || obj["error"] != "ratelimited" || len(obj) != 2 {
			return fmt.Errorf("%s: a 429 must carry Retry-After and {ok: false, error: ratelimited}: %s (Retry-After %d)", method, body, retryAfter)
		}
		return nil
	}
	if status != 200 {
		return fmt.Errorf("%s: status %d (Slack answers 200, or 429)", method, status)
	}
	if method == "apps.connections.open" {
		return connectionsOpen(obj)
	}
	verb, _, ok := operation(method)
	if !ok {
		return fmt.Errorf("%s: not in the description", method)
	}
	which := "default"
	if obj["ok"] == true {
		which = "200"
	} else if e, _ := obj["error"].(string); (commonErrors[e] || commonErrors[method+" "+e]) && len(obj) == 2 {
		return nil
	}
	if method == "conversations.replies" && which == "200" {
		return replies(obj)
	}
	if method == "chat.update" && which == "200" {
		if err := chatUpdate(obj); err != nil {
			return err
		}
	}
	s, err := compile(webBase + "#/paths/" + pointer("/"+method) + "/" + verb + "/responses/" + which + "/schema")
	if err != nil {
		return err
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("%s %s answer: %w", method, which, err)
	}
	return nil
}

// chatUpdate checks and removes message.blocks (see the package doc).
func chatUpdate(obj map[string]any) error {
	m, _ := obj["message"].(map[string]any)
	b, ok := m["blocks"]
	if !ok {
		return nil
	}
	s, err := compile(webBase + "#/definitions/blocks")
	if err != nil {
		return err
	}
	if err := s.Validate(b); err != nil {
		return fmt.Errorf("chat.update message.blocks: %w", err)
	}
	delete(m, "blocks")
	return nil
}

// commonErrors are errors every method may answer that the enums lack
// (see the package doc).
var commonErrors = map[string]bool{
	"not_allowed_token_type":            true,
	"chat.postMessage invalid_blocks":   true,
	"chat.update invalid_blocks":        true,
	"chat.postEphemeral invalid_blocks": true,
}

func connectionsOpen(obj map[string]any) error {
	if obj["ok"] == false {
		if e, _ := obj["error"].(string); e == "" {
			return fmt.Errorf("apps.connections.open: an error without error")
		}
		return nil
	}
	u, _ := obj["url"].(string)
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "wss" && p.Scheme != "ws") || len(obj) != 2 {
		return fmt.Errorf("apps.connections.open: want {ok: true, url: wss://...}, got %v", obj)
	}
	return nil
}

// replies checks conversations.replies' answer (see the package doc).
func replies(obj map[string]any) error {
	if md, ok := obj["response_metadata"]; ok {
		m, _ := md.(map[string]any)
		if c, _ := m["next_cursor"].(string); c == "" || len(m) != 1 {
			return fmt.Errorf("conversations.replies: response_metadata %v: want {next_cursor}", md)
		}
		delete(obj, "response_metadata")
	}
	msgs, _ := obj["messages"].([]any)
	rest := map[string]any{}
	for k, v := range obj {
		rest[k] = v
	}
	rest["messages"] = []any{}
	s, err := compile(webBase + "#/paths/" + pointer("/conversations.replies") + "/get/responses/200/schema")
	if err != nil {
		return err
	}
	if err := s.Validate(rest); err != nil {
		return fmt.Errorf("conversations.replies answer: %w", err)
	}
	ms, err := compile(webBase + "#/definitions/objs_message")
	if err != nil {
		return err
	}
	for i, m := range msgs {
		if err := ms.Validate(m); err != nil {
			return fmt.Errorf("conversations.replies messages[%d]: %w", i, err)
		}
	}
	return nil
}

// HasTopic reports whether the pinned events description has a topic.
func HasTopic(topic string) bool {
	_, err := compile(eventsBase + "#/topics/" + pointer(topic) + "/subscribe/payload")
	return err == nil
}

// ValidateEvent checks an Events API payload against its topic's
// payload schema and the common event wrapper.
func ValidateEvent(topic string, payload []byte) error {
	s, err := compile(eventsBase + "#/topics/" + pointer(topic) + "/subscribe/payload")
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("topic %s: not JSON: %w", topic, err)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	if err := wrapper.Validate(inst); err != nil {
		return fmt.Errorf("topic %s, event wrapper: %w", topic, err)
	}
	return nil
}

// CheckExchanges validates what a test saw go through the stand-in: each
// Web API call's arguments and answer (Server.Calls) and each event's
// payload (Server.Envelopes), returning every mismatch. Calls to unknown
// methods (404) are skipped; interactions and slash commands are in no
// description (see the package doc).
func CheckExchanges(calls []slacksim.Call, envelopes []slacksim.Envelope) []error {
	return check(calls, envelopes, true)
}

// CheckAnswers is CheckExchanges without the arguments: for a test that
// sends bad requests on purpose.
func CheckAnswers(calls []slacksim.Call, envelopes []slacksim.Envelope) []error {
	return check(calls, envelopes, false)
}

func check(calls []slacksim.Call, envelopes []slacksim.Envelope, requests bool) []error {
	var errs []error
	for _, c := range calls {
		if c.Status == 404 {
			continue
		}
		if requests && c.Method != "apps.connections.open" {
			if err := ValidateParams(c.Method, c.Params, c.Token != "none"); err != nil {
				errs = append(errs, fmt.Errorf("call %d: %w", c.Seq, err))
			}
		}
		if err := ValidateResponse(c.Method, c.Status, c.RetryAfter, c.Response); err != nil {
			errs = append(errs, fmt.Errorf("call %d: %w", c.Seq, err))
		}
	}
	for _, e := range envelopes {
		if e.Kind != slacksim.KindEventsAPI {
			continue
		}
		if err := ValidateEvent(e.Topic, e.Payload); err != nil {
			errs = append(errs, fmt.Errorf("envelope %s: %w", e.ID, err))
		}
	}
	return errs
}
