// Package ghschema checks what the GitHub stand-in (package ghsim) says
// against GitHub's own published descriptions, whole: the REST
// description of @octokit/openapi 23.0.2 and the webhooks description of
// @octokit/openapi-webhooks 12.1.0, pinned in descriptions/ by
// internal/extract (SOURCE.json records the npm integrity of each tarball
// and the SHA-256 of each file, which Source checks).
//
// Both are validated with santhosh-tekuri/jsonschema: the webhooks
// description is OpenAPI 3.1 (JSON Schema 2020-12); the REST one is
// OpenAPI 3.0, whose schemas are draft 4 with "nullable", rewritten as
// JSON Schema when loaded (see REST). Formats are asserted (date-time,
// date, email, uri, uri-template, ...), with one exception GitHub itself
// makes: its bots' noreply addresses are not RFC 5322 (see emailFormat).
//
// It is meant for tests (loading the descriptions takes a second or
// two, once per process); ghsim itself does not import it.
package ghschema

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

//go:embed descriptions
var files embed.FS

// Pin is one pinned description, as SOURCE.json records it.
type Pin struct {
	Package   string `json:"package"`
	Version   string `json:"version"`
	Integrity string `json:"integrity"`
	File      string `json:"file"`
	Pinned    string `json:"pinned"`
	SHA256    string `json:"sha256"`
}

// Sources are the two pins.
type Sources struct {
	REST     Pin `json:"rest"`
	Webhooks Pin `json:"webhooks"`
}

var (
	srcOnce sync.Once
	src     Sources
	srcErr  error
	restRaw []byte
	hookRaw []byte

	restOnce sync.Once
	restDoc  map[string]any
	restComp *jsonschema.Compiler
	restErr  error
	restMu   sync.Mutex
	restSch  = map[string]*jsonschema.Schema{}

	hookOnce sync.Once
	hookComp *jsonschema.Compiler
	hookDoc  map[string]any
	hookErr  error
	hookMu   sync.Mutex
	hookSch  = map[string]*jsonschema.Schema{}
)

// Source reads SOURCE.json and the pinned files, checking each file's
// SHA-256 against it.
func Source() (Sources, error) {
	srcOnce.Do(func() {
		b, err := files.ReadFile("descriptions/SOURCE.json")
		if err != nil {
			srcErr = err
			return
		}
		if err := json.Unmarshal(b, &src); err != nil {
			srcErr = fmt.Errorf("SOURCE.json: %w", err)
			return
		}
		if restRaw, err = readPinned(src.REST); err != nil {
			srcErr = err
			return
		}
		hookRaw, srcErr = readPinned(src.Webhooks)
	})
	return src, srcErr
}

func readPinned(p Pin) ([]byte, error) {
	f, err := files.Open("descriptions/" + p.Pinned)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Pinned, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Pinned, err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != p.SHA256 {
		return nil, fmt.Errorf("%s: SHA-256 %s, SOURCE.json says %s: run internal/extract again", p.Pinned, got, p.SHA256)
	}
	return b, nil
}

var uriTemplate = regexp.MustCompile(`^([^{}]|\{[+#./;?&=,!@|]?[A-Za-z0-9_%.]+(\*|:[0-9]+)?(,[A-Za-z0-9_%.]+(\*|:[0-9]+)?)*\})*$`)

func uriTemplateFormat(s string) error {
	if !uriTemplate.MatchString(s) {
		return fmt.Errorf("not a URI template: %q", s)
	}
	return nil
}

// restBase names the REST description as a schema resource.
const restBase = "https://ghschema.test/rest.json"

// REST is the REST description as JSON, loaded once, with OpenAPI 3.0's
// nullable turned into JSON Schema (a type with "null", null added to an
// enum, a nullable oneOf/anyOf/allOf made an anyOf with null), and a
// compiler for its schemas (draft 4, which OpenAPI 3.0's schemas extend:
// a $ref's siblings are ignored, as 3.0 says).
func REST() (map[string]any, error) {
	restOnce.Do(func() {
		if _, err := Source(); err != nil {
			restErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(restRaw))
		if err != nil {
			restErr = err
			return
		}
		restDoc = nullable(doc).(map[string]any)
		restComp = jsonschema.NewCompiler()
		restComp.DefaultDraft(jsonschema.Draft4)
		restComp.AssertFormat()
		registerFormats(restComp)
		restErr = restComp.AddResource(restBase, restDoc)
	})
	return restDoc, restErr
}

// nullable rewrites OpenAPI 3.0's "nullable: true" as JSON Schema.
func nullable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = nullable(x)
		}
		n, _ := v["nullable"].(bool)
		delete(v, "nullable")
		if !n {
			return v
		}
		switch t := v["type"].(type) {
		case string:
			v["type"] = []any{t, "null"}
			if e, ok := v["enum"].([]any); ok {
				v["enum"] = append(e, nil)
			}
			return v
		case []any:
			v["type"] = append(t, "null")
			return v
		}
		for _, k := range []string{"oneOf", "anyOf", "allOf"} {
			if _, ok := v[k]; ok {
				inner := map[string]any{}
				for kk, x := range v {
					if kk != "description" && kk != "title" {
						inner[kk] = x
						delete(v, kk)
					}
				}
				v["anyOf"] = []any{inner, map[string]any{"type": "null"}}
				return v
			}
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = nullable(x)
		}
	}
	return v
}

func registerFormats(c *jsonschema.Compiler) {
	c.RegisterFormat(&jsonschema.Format{Name: "uri-template", Validate: func(v any) error {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		return uriTemplateFormat(s)
	}})
	c.RegisterFormat(&jsonschema.Format{Name: "email", Validate: func(v any) error {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		return emailFormat(s)
	}})
}

// botNoreply is the noreply address GitHub gives an app's bot
// (ID+slug[bot]@users.noreply.HOST, or without the id): GitHub sends it in
// push payloads and commits, though "[" makes it no RFC 5322 addr-spec,
// which the description's "format: email" asks for. It is the one
// exception emailFormat makes.
var botNoreply = regexp.MustCompile(`^([0-9]+\+)?[A-Za-z0-9][A-Za-z0-9-]*\[bot\]@users\.noreply\.[A-Za-z0-9.-]+$`)

// emailFormat accepts an RFC 5322 addr-spec (as net/mail parses one,
// with nothing around it), or GitHub's own bot addresses.
func emailFormat(s string) error {
	if botNoreply.MatchString(s) {
		return nil
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return fmt.Errorf("not an email address: %q", s)
	}
	return nil
}

// pointer is a JSON pointer fragment of keys.
func pointer(keys ...string) string {
	var b strings.Builder
	b.WriteString("#")
	for _, k := range keys {
		k = strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
		b.WriteString("/" + url.PathEscape(k))
	}
	return b.String()
}

// restSchema compiles the schema at fragment of the REST description.
func restSchema(fragment string) (*jsonschema.Schema, error) {
	restMu.Lock()
	defer restMu.Unlock()
	if s := restSch[fragment]; s != nil {
		return s, nil
	}
	s, err := restComp.Compile(restBase + fragment)
	if err != nil {
		return nil, err
	}
	restSch[fragment] = s
	return s, nil
}

// operation returns method path's operation object.
func operation(method, path string) (map[string]any, bool) {
	doc, err := REST()
	if err != nil {
		return nil, false
	}
	op, ok := dig(doc, "paths", path, strings.ToLower(method)).(map[string]any)
	return op, ok
}

// HasOperation reports whether the REST description has method path (a
// template as it is keyed, like /repos/{owner}/{repo}).
func HasOperation(method, path string) bool {
	_, ok := operation(method, path)
	return ok
}

// Paths is how many paths the REST description has.
func Paths() int {
	doc, err := REST()
	if err != nil {
		return 0
	}
	m, _ := doc["paths"].(map[string]any)
	return len(m)
}

// MatchOperation finds the template a request path (with or without
// /api/v3) is an instance of, preferring the one with more literal
// segments.
func MatchOperation(method, path string) (string, bool) {
	doc, err := REST()
	if err != nil {
		return "", false
	}
	path = strings.TrimPrefix(path, "/api/v3")
	segs := strings.Split(strings.Trim(path, "/"), "/")
	best, bestLit := "", -1
	paths, _ := doc["paths"].(map[string]any)
	for tmpl, item := range paths {
		if _, ok := dig(item, strings.ToLower(method)).(map[string]any); !ok {
			continue
		}
		tsegs := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(tsegs) != len(segs) {
			continue
		}
		lit, ok := 0, true
		for i, ts := range tsegs {
			if strings.HasPrefix(ts, "{") {
				continue
			}
			if ts != segs[i] {
				ok = false
				break
			}
			lit++
		}
		if ok && (lit > bestLit || lit == bestLit && tmpl < best) {
			best, bestLit = tmpl, lit
		}
	}
	return best, bestLit >= 0
}

// ValidateREST checks a request body and the answer to it against the
// operation method path (a template): the status must be one the
// operation documents (else, for an error, GitHub's basic-error shape)
// and the body its schema.
func ValidateREST(method, path string, status int, reqBody, respBody []byte) error {
	op, ok := operation(method, path)
	if !ok {
		return fmt.Errorf("%s %s: not in GitHub's description", method, path)
	}
	m := strings.ToLower(method)
	if len(reqBody) > 0 {
		if _, ok := dig(op, "requestBody", "content", "application/json", "schema").(map[string]any); ok {
			s, err := restSchema(pointer("paths", path, m, "requestBody", "content", "application/json", "schema"))
			if err != nil {
				return err
			}
			if err := validate(s, reqBody); err != nil {
				return fmt.Errorf("request body %s: %w", reqBody, err)
			}
		}
	}
	code := strconv.Itoa(status)
	resp, ok := dig(op, "responses", code).(map[string]any)
	where := []string{"paths", path, m, "responses", code}
	if ref, _ := resp["$ref"].(string); ok && ref != "" {
		name := strings.TrimPrefix(ref, "#/components/responses/")
		resp, _ = dig(restDoc, "components", "responses", name).(map[string]any)
		where = []string{"components", "responses", name}
	}
	var frag string
	switch {
	case resp != nil && dig(resp, "content", "application/json", "schema") != nil:
		frag = pointer(append(where, "content", "application/json", "schema")...)
	case resp != nil && status == http.StatusNoContent:
		return nil
	case status >= 200 && status < 300:
		return fmt.Errorf("status %d: not documented for %s %s", status, method, path)
	default:
		frag = pointer("components", "schemas", "basic-error")
	}
	s, err := restSchema(frag)
	if err != nil {
		return err
	}
	if err := validate(s, respBody); err != nil {
		return fmt.Errorf("response %d: %w", status, err)
	}
	return nil
}

func validate(s *jsonschema.Schema, body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// HookSchema compiles the payload schema of a webhook kind (as the
// description keys it: "issue-comment-created", "push").
func HookSchema(kind string) (*jsonschema.Schema, error) {
	hookOnce.Do(func() {
		if _, err := Source(); err != nil {
			hookErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(hookRaw))
		if err != nil {
			hookErr = err
			return
		}
		hookDoc = doc.(map[string]any)
		hookComp = jsonschema.NewCompiler()
		hookComp.AssertFormat()
		registerFormats(hookComp)
		hookErr = hookComp.AddResource("https://ghschema.test/webhooks.json", doc)
	})
	if hookErr != nil {
		return nil, hookErr
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if s := hookSch[kind]; s != nil {
		return s, nil
	}
	h, _ := hookDoc["webhooks"].(map[string]any)[kind].(map[string]any)
	if h == nil {
		return nil, fmt.Errorf("webhook %s: not in GitHub's description", kind)
	}
	ref, _ := dig(h, "post", "requestBody", "content", "application/json", "schema", "$ref").(string)
	if ref == "" {
		return nil, fmt.Errorf("webhook %s: no payload schema", kind)
	}
	s, err := hookComp.Compile("https://ghschema.test/webhooks.json" + ref)
	if err != nil {
		return nil, err
	}
	hookSch[kind] = s
	return s, nil
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// ValidateHook checks a webhook payload against its kind's schema.
func ValidateHook(kind string, payload []byte) error {
	s, err := HookSchema(kind)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// ErrNoOperation is a request path no operation of the description
// matches.
var ErrNoOperation = errors.New("no operation of GitHub's description matches")

// CheckExchanges validates everything a stand-in said: every REST answer
// in its request log (with the request's body) and every webhook in its
// delivery log. Git and control requests are not GitHub's REST and are
// left out. It returns one error per exchange that does not validate.
func CheckExchanges(reqs []ghsim.Request, hooks []ghsim.Delivery) []error {
	var errs []error
	for _, r := range reqs {
		if r.Response == nil || strings.HasPrefix(r.Path, "/_sim/") {
			continue
		}
		tmpl, ok := MatchOperation(r.Method, r.Path)
		if !ok {
			errs = append(errs, fmt.Errorf("request %d %s %s: %w", r.Seq, r.Method, r.Path, ErrNoOperation))
			continue
		}
		body := []byte(r.Body)
		if knownRequestGaps[r.Method+" "+tmpl] != "" {
			body = nil
		}
		if err := ValidateREST(r.Method, tmpl, r.Status, body, r.Response); err != nil {
			errs = append(errs, fmt.Errorf("request %d %s %s (%s): %w", r.Seq, r.Method, r.Path, tmpl, err))
		}
	}
	for _, d := range hooks {
		if err := ValidateHook(string(d.Kind), d.Payload); err != nil {
			errs = append(errs, fmt.Errorf("webhook %d %s (%s): %w", d.ID, d.Kind, d.GUID, err))
		}
	}
	return errs
}

// knownRequestGaps are request bodies clients send that GitHub accepts
// but its own description does not allow; the reason is the finding.
var knownRequestGaps = map[string]string{
	"POST /repos/{owner}/{repo}/pulls/{pull_number}/comments": "go-github's CreateCommentInReplyTo sends only body and in_reply_to; " +
		"the description requires commit_id and path although GitHub ignores them for a reply.",
}
