package server

import _ "embed"

// openAPIDoc is the API as OpenAPI 3.1, written by hand next to the route
// table; TestOpenAPIMatchesRoutes fails when the two drift apart (a route,
// a method, a status, or a field of a request or response body).
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the API document served at /openapi.json.
func OpenAPI() []byte { return openAPIDoc }
