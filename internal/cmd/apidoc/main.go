// Command apidoc writes docs/api.md, the API's reference, from the OpenAPI
// document harvest serve serves at /openapi.json (server/openapi.json):
// every route with its parameters, body and answers, then every schema
// with its fields. The document is the one source: the server's tests
// check it against the handlers, and TestUpToDate here fails when
// docs/api.md was not regenerated after a change to it:
//
//	go generate ./internal/cmd/apidoc
//
// Only what the document says is written; nothing is added by hand.
package main

//go:generate go run . -in ../../../server/openapi.json -out ../../../docs/api.md

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	in := flag.String("in", "server/openapi.json", "the OpenAPI document")
	out := flag.String("out", "docs/api.md", "the markdown file to write")
	flag.Parse()
	src, err := os.ReadFile(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
	md, err := Render(src)
	if err != nil {
		fmt.Fprintf(os.Stderr, "apidoc: %s: %v\n", *in, err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, md, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
}
