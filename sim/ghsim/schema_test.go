package ghsim_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// The pinned subsets of GitHub's own descriptions (internal/extract).

func readGz(t testing.TB, name string) []byte {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	restOnce sync.Once
	restDoc  *openapi3.T
	restErr  error
	hookOnce sync.Once
	hookComp *jsonschema.Compiler
	hookDoc  map[string]any
	hookErr  error
)

func init() { openapi3.SchemaErrorDetailsDisabled = true }

func loadREST(t testing.TB) *openapi3.T {
	restOnce.Do(func() {
		l := openapi3.NewLoader()
		restDoc, restErr = l.LoadFromData(readGz(t, "rest.json.gz"))
	})
	if restErr != nil {
		t.Fatal(restErr)
	}
	return restDoc
}

// hookSchema compiles the webhook schema of kind.
func hookSchema(t testing.TB, kind ghsim.WebhookKind) *jsonschema.Schema {
	t.Helper()
	hookOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(readGz(t, "webhooks.json.gz")))
		if err != nil {
			hookErr = err
			return
		}
		hookDoc = doc.(map[string]any)
		hookComp = jsonschema.NewCompiler()
		hookErr = hookComp.AddResource("https://ghsim.test/webhooks.json", doc)
	})
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	h, _ := hookDoc["webhooks"].(map[string]any)[string(kind)].(map[string]any)
	if h == nil {
		t.Fatalf("webhook %s: not in the pinned subset", kind)
	}
	ref := h["post"].(map[string]any)["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)["$ref"].(string)
	s, err := hookComp.Compile("https://ghsim.test/webhooks.json" + ref)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validateHook checks a webhook payload against its kind's schema.
func validateHook(t testing.TB, kind ghsim.WebhookKind, payload []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return err
	}
	return hookSchema(t, kind).Validate(v)
}

// matchOperation finds the operation a request path is an instance of,
// preferring the template with more literal segments.
func matchOperation(method, path string) (ghsim.Operation, bool) {
	path = strings.TrimPrefix(path, "/api/v3")
	segs := strings.Split(strings.Trim(path, "/"), "/")
	best, bestLit := ghsim.Operation{}, -1
	for _, op := range ghsim.Operations() {
		if op.Method != method {
			continue
		}
		tsegs := strings.Split(strings.Trim(op.Path, "/"), "/")
		psegs := segs
		if strings.HasSuffix(op.Path, "/git/refs/{ref}") && len(segs) > len(tsegs) {
			// {ref} takes the rest: heads/harvest/s-...
			psegs = append(slices.Clone(segs[:len(tsegs)-1]), strings.Join(segs[len(tsegs)-1:], "/"))
		}
		if len(tsegs) != len(psegs) {
			continue
		}
		lit := 0
		ok := true
		for i, ts := range tsegs {
			if strings.HasPrefix(ts, "{") {
				continue
			}
			if ts != psegs[i] {
				ok = false
				break
			}
			lit++
		}
		if ok && lit > bestLit {
			best, bestLit = op, lit
		}
	}
	return best, bestLit >= 0
}

// validateREST checks a request body and a response against the
// operation's description: the status must be one it documents (else, for
// an error, GitHub's basic-error shape) and the body its schema.
func validateREST(t testing.TB, op ghsim.Operation, status int, reqBody, respBody []byte) error {
	doc := loadREST(t)
	item := doc.Paths.Find(op.Path)
	if item == nil {
		return fmt.Errorf("%s %s: not in the subset", op.Method, op.Path)
	}
	o := item.GetOperation(op.Method)
	if o == nil {
		return fmt.Errorf("%s %s: not in the subset", op.Method, op.Path)
	}
	if len(reqBody) > 0 && o.RequestBody != nil {
		var v any
		if err := json.Unmarshal(reqBody, &v); err != nil {
			return fmt.Errorf("request body: %w", err)
		}
		mt := o.RequestBody.Value.Content.Get("application/json")
		if err := mt.Schema.Value.VisitJSON(v); err != nil {
			return fmt.Errorf("request body %s: %w", reqBody, err)
		}
	}
	r := o.Responses.Status(status)
	var schema *openapi3.Schema
	switch {
	case r != nil && r.Value.Content.Get("application/json") != nil:
		schema = r.Value.Content.Get("application/json").Schema.Value
	case r != nil && status == http.StatusNoContent:
		return nil
	case status >= 200 && status < 300:
		return fmt.Errorf("status %d: not documented for %s %s", status, op.Method, op.Path)
	default:
		schema = doc.Components.Schemas["basic-error"].Value
	}
	var v any
	if err := json.Unmarshal(respBody, &v); err != nil {
		return fmt.Errorf("response body: %w", err)
	}
	if err := visit(schema, v); err != nil {
		return fmt.Errorf("response %d: %w", status, err)
	}
	return nil
}

// visit validates v. kin-openapi checks a oneOf with a discriminator
// (GET /user and GET /users/{username}: private-user or public-user by
// user_view_type) only against the branch the discriminator names, so a
// top-level oneOf must also match exactly one branch on its own. Here it
// can: public-user forbids other fields, and private-user requires fields
// a public body lacks.
func visit(schema *openapi3.Schema, v any) error {
	if err := schema.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		return err
	}
	if len(schema.OneOf) == 0 {
		return nil
	}
	var errs []error
	for _, it := range schema.OneOf {
		if err := it.Value.VisitJSON(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", it.Ref, err))
		}
	}
	if n := len(schema.OneOf) - len(errs); n != 1 {
		return fmt.Errorf("matches %d branches of oneOf: %v", n, errs)
	}
	return nil
}

// TestSubsetCoversServer: every operation and webhook the stand-in serves
// is in the pinned subset, and the subset says where it came from.
func TestSubsetCoversServer(t *testing.T) {
	doc := loadREST(t)
	for _, op := range ghsim.Operations() {
		item := doc.Paths.Find(op.Path)
		if item == nil || item.GetOperation(op.Method) == nil {
			t.Errorf("%s %s: served but not in testdata/rest.json.gz; run internal/extract", op.Method, op.Path)
		}
	}
	for _, k := range ghsim.WebhookKinds() {
		hookSchema(t, k)
	}
	var src struct {
		REST     struct{ Package, Version, Integrity string } `json:"rest"`
		Webhooks struct{ Package, Version, Integrity string } `json:"webhooks"`
		Ops      []string                                     `json:"operations"`
	}
	b, err := os.ReadFile("testdata/SOURCE.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &src); err != nil {
		t.Fatal(err)
	}
	if src.REST.Package != "@octokit/openapi" || src.REST.Version != "23.0.2" || !strings.HasPrefix(src.REST.Integrity, "sha512-") {
		t.Errorf("SOURCE.json rest: %+v", src.REST)
	}
	if src.Webhooks.Package != "@octokit/openapi-webhooks" || src.Webhooks.Version != "12.1.0" || !strings.HasPrefix(src.Webhooks.Integrity, "sha512-") {
		t.Errorf("SOURCE.json webhooks: %+v", src.Webhooks)
	}
	if len(src.Ops) != len(ghsim.Operations()) {
		t.Errorf("SOURCE.json lists %d operations, the server serves %d: run internal/extract", len(src.Ops), len(ghsim.Operations()))
	}
}

// validatingTransport checks every REST exchange against the subset and
// counts which operations answered with success.
type validatingTransport struct {
	t    testing.TB
	base http.RoundTripper

	mu      sync.Mutex
	covered map[ghsim.Operation]bool
}

// knownRequestGaps are request bodies go-github sends that GitHub accepts
// but its own description does not: the reason is the finding.
var knownRequestGaps = map[ghsim.Operation]string{
	{Method: "POST", Path: "/repos/{owner}/{repo}/pulls/{pull_number}/comments"}: "go-github's CreateCommentInReplyTo sends only body and in_reply_to; " +
		"the description requires commit_id and path although GitHub ignores them for a reply. " +
		"Harvest should reply through POST .../comments/{comment_id}/replies.",
}

func newValidatingTransport(t testing.TB) *validatingTransport {
	return &validatingTransport{t: t, base: http.DefaultTransport, covered: map[ghsim.Operation]bool{}}
}

func (v *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	op, ok := matchOperation(req.Method, req.URL.Path)
	if !ok {
		v.t.Errorf("%s %s: no operation matches", req.Method, req.URL.Path)
		return resp, nil
	}
	if knownRequestGaps[op] != "" {
		reqBody = nil
	}
	if err := validateREST(v.t, op, resp.StatusCode, reqBody, respBody); err != nil {
		v.t.Errorf("%s %s (%s): %v", req.Method, req.URL.Path, op.Path, err)
	}
	if resp.StatusCode < 300 {
		v.mu.Lock()
		v.covered[op] = true
		v.mu.Unlock()
	}
	return resp, nil
}

func (v *validatingTransport) missing() []ghsim.Operation {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []ghsim.Operation
	for _, op := range ghsim.Operations() {
		if !v.covered[op] {
			out = append(out, op)
		}
	}
	return out
}

// TestValidatorsReject: the validators are not vacuous; an empty object
// and a payload missing one required field both fail.
func TestValidatorsReject(t *testing.T) {
	for _, k := range ghsim.WebhookKinds() {
		if validateHook(t, k, []byte(`{}`)) == nil {
			t.Errorf("webhook %s: {} validates", k)
		}
	}
	for _, op := range ghsim.Operations() {
		status := 200
		if op.Method == "POST" {
			status = 201
		}
		if err := validateREST(t, op, status, nil, []byte(`{"id": "x"}`)); err == nil {
			t.Errorf("%s %s: a bad body validates", op.Method, op.Path)
		}
	}
	for _, op := range []ghsim.Operation{{Method: "GET", Path: "/user"}, {Method: "GET", Path: "/users/{username}"}} {
		if validateREST(t, op, 200, nil, []byte(`{"login": "x"}`)) == nil {
			t.Errorf("%s %s: a partial user validates", op.Method, op.Path)
		}
	}
}
