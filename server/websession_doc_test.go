package server

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestWebSessionDocumented: the sign-in's bodies match their schemas, and
// every route that changes state and takes a user token documents the
// 403 a cookie request without its CSRF token (or from another site) gets.
func TestWebSessionDocumented(t *testing.T) {
	d := loadDoc(t)
	for name, typ := range map[string]reflect.Type{
		"SignInRequest": reflect.TypeFor[SignInRequest](),
		"SignedIn":      reflect.TypeFor[SignedIn](),
	} {
		doc := schemaProps(d, d.Components.Schemas[name])
		if code := jsonFields(typ); !slices.Equal(doc, code) {
			t.Errorf("schema %s documents %v; %s has %v", name, doc, typ, code)
		}
	}
	for _, rt := range testRoutes() {
		if rt.access == public || safeMethod(rt.method) {
			continue
		}
		var op struct {
			Responses map[string]json.RawMessage `json:"responses"`
		}
		if err := json.Unmarshal(d.Paths[rt.path][strings.ToLower(rt.method)], &op); err != nil {
			t.Fatalf("%s %s: %v", rt.method, rt.path, err)
		}
		if _, ok := op.Responses["403"]; !ok {
			t.Errorf("%s %s changes state, so a cookie request can get 403; openapi.json does not say so", rt.method, rt.path)
		}
	}
}
