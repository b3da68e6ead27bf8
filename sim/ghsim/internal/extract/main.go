// Command extract cuts, from GitHub's published OpenAPI descriptions as
// pinned npm tarballs, the subset the stand-in serves: the REST operations
// ghsim.Operations names and the webhooks ghsim.WebhookKinds names, with
// every component they reference (transitively), examples dropped. It
// writes them, gzipped, with a note of where they came from:
//
//	go run ./sim/ghsim/internal/extract \
//	    -rest /tmp/octo/octokit-openapi-23.0.2.tgz \
//	    -webhooks /tmp/octo/octokit-openapi-webhooks-12.1.0.tgz \
//	    -out sim/ghsim/testdata
//
// The tarballs are `npm pack @octokit/openapi@23.0.2` and
// `npm pack @octokit/openapi-webhooks@12.1.0`; each is checked against the
// npm integrity pinned below before it is read.
//
// With -examples (`npm pack @octokit/webhooks-examples@7.6.1`: recorded
// payloads of real deliveries, from octokit/webhooks) it also writes
// webhook-examples.json.gz: the examples of the events Harvest handles
// (exampleEvents), every action, as the package has them. No @octokit
// package pins an examples version to an openapi-webhooks one; 7.6.1 is
// the package's latest, the one current with openapi-webhooks 12.x.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// Source names one pinned npm tarball.
type Source struct {
	Package   string `json:"package"`
	Version   string `json:"version"`
	Integrity string `json:"integrity"` // npm's: "sha512-" + base64
	File      string `json:"file"`      // inside the tarball
	Subset    string `json:"subset"`    // the file written in testdata
}

// The pins. Changing a version means a new integrity; the tool refuses a
// tarball whose digest differs.
var (
	restSource = Source{
		Package:   "@octokit/openapi",
		Version:   "23.0.2",
		Integrity: "sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4lnw7u5eZGNmwRNkBC3D7gZXbFx5AHzLUVRBXGDhg==",
		File:      "package/generated/api.github.com.json",
		Subset:    "rest.json.gz",
	}
	examplesSource = Source{
		Package:   "@octokit/webhooks-examples",
		Version:   "7.6.1",
		Integrity: "sha512-De6U3XB6O3DtCa7bKgCMzTHdeopqqZ6SNivMYJnK65ierKL1AnNIA0tkRYCRS7lwGT792d+Ps1WbfHlso6MynQ==",
		File:      "package/api.github.com/index.json",
		Subset:    "webhook-examples.json.gz",
	}
	webhooksSource = Source{
		Package:   "@octokit/openapi-webhooks",
		Version:   "12.1.0",
		Integrity: "sha512-Z5eDsLCUNbx1zHpZb1LNQirADqdMTvWJQ/deahi0ws+tWWnwHXB+Pr4jfmM9OrETS9Y5iW8ZRu1fdbudObhLrg==",
		File:      "package/generated/api.github.com.json",
		Subset:    "webhooks.json.gz",
	}
)

// exampleEvents are the events Harvest's webhook side handles (package
// ghbot), whose recorded examples are kept.
var exampleEvents = []string{"issue_comment", "issues", "pull_request", "pull_request_review",
	"pull_request_review_comment", "check_suite", "installation", "installation_repositories"}

func main() {
	rest := flag.String("rest", "", "the @octokit/openapi tarball (npm pack)")
	hooks := flag.String("webhooks", "", "the @octokit/openapi-webhooks tarball (npm pack)")
	examples := flag.String("examples", "", "the @octokit/webhooks-examples tarball (npm pack); optional")
	out := flag.String("out", "sim/ghsim/testdata", "directory to write the subsets to")
	flag.Parse()
	if *rest == "" || *hooks == "" {
		fmt.Fprintln(os.Stderr, "extract: give -rest TARBALL and -webhooks TARBALL")
		os.Exit(2)
	}
	if err := run(*rest, *hooks, *examples, *out); err != nil {
		fmt.Fprintln(os.Stderr, "extract:", err)
		os.Exit(1)
	}
}

func run(restTGZ, hooksTGZ, examplesTGZ, out string) error {
	doc, err := readPinned(restTGZ, restSource)
	if err != nil {
		return err
	}
	var ops []string
	for _, op := range ghsim.Operations() {
		ops = append(ops, op.Method+" "+op.Path)
	}
	sub, err := restSubset(doc)
	if err != nil {
		return err
	}
	if err := writeGz(filepath.Join(out, restSource.Subset), sub); err != nil {
		return err
	}

	wdoc, err := readPinned(hooksTGZ, webhooksSource)
	if err != nil {
		return err
	}
	wsub, err := webhooksSubset(wdoc)
	if err != nil {
		return err
	}
	if err := writeGz(filepath.Join(out, webhooksSource.Subset), wsub); err != nil {
		return err
	}
	var kinds []string
	for _, k := range ghsim.WebhookKinds() {
		kinds = append(kinds, string(k))
	}
	note := map[string]any{
		"generator":  "go run ./sim/ghsim/internal/extract",
		"rest":       restSource,
		"webhooks":   webhooksSource,
		"operations": ops,
		"hooks":      kinds,
	}
	if examplesTGZ != "" {
		raw, err := readPinnedRaw(examplesTGZ, examplesSource)
		if err != nil {
			return err
		}
		var all []map[string]any
		if err := json.Unmarshal(raw, &all); err != nil {
			return fmt.Errorf("%s: %s: %w", examplesTGZ, examplesSource.File, err)
		}
		var keep []map[string]any
		for _, e := range all {
			for _, name := range exampleEvents {
				if e["name"] == name {
					keep = append(keep, map[string]any{"name": name, "examples": e["examples"]})
				}
			}
		}
		if len(keep) != len(exampleEvents) {
			return fmt.Errorf("%s: %d of the %d events have examples", examplesTGZ, len(keep), len(exampleEvents))
		}
		if err := writeGz(filepath.Join(out, examplesSource.Subset), keep); err != nil {
			return err
		}
		note["examples"] = examplesSource
		note["example_events"] = exampleEvents
	} else if b, err := os.ReadFile(filepath.Join(out, "SOURCE.json")); err == nil {
		// Keep the examples' note when they are not extracted again.
		var old map[string]any
		if json.Unmarshal(b, &old) == nil && old["examples"] != nil {
			note["examples"], note["example_events"] = old["examples"], old["example_events"]
		}
	}
	b, _ := json.MarshalIndent(note, "", "  ")
	return os.WriteFile(filepath.Join(out, "SOURCE.json"), append(b, '\n'), 0o644)
}

// readPinned checks the tarball's integrity and returns its description.
func readPinned(path string, src Source) (map[string]any, error) {
	b, err := readPinnedRaw(path, src)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, src.File, err)
	}
	return doc, nil
}

// readPinnedRaw checks the tarball's integrity and returns src.File.
func readPinnedRaw(path string, src Source) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha512.Sum512(raw)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != src.Integrity {
		return nil, fmt.Errorf("%s: integrity %s, want %s@%s's %s", path, got, src.Package, src.Version, src.Integrity)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no %s", path, src.File)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Name != src.File {
			continue
		}
		return io.ReadAll(tr)
	}
}

func restSubset(doc map[string]any) (map[string]any, error) {
	paths, _ := doc["paths"].(map[string]any)
	keep := map[string]any{}
	for _, op := range ghsim.Operations() {
		item, _ := paths[op.Path].(map[string]any)
		o, ok := item[strings.ToLower(op.Method)]
		if !ok {
			return nil, fmt.Errorf("%s %s: not in the description", op.Method, op.Path)
		}
		dst, _ := keep[op.Path].(map[string]any)
		if dst == nil {
			dst = map[string]any{}
			keep[op.Path] = dst
		}
		dst[strings.ToLower(op.Method)] = o
	}
	sub := map[string]any{
		"openapi": doc["openapi"],
		"info":    doc["info"],
		"paths":   keep,
	}
	return withComponents(sub, doc)
}

func webhooksSubset(doc map[string]any) (map[string]any, error) {
	hooks, _ := doc["webhooks"].(map[string]any)
	keep := map[string]any{}
	for _, k := range ghsim.WebhookKinds() {
		h, ok := hooks[string(k)]
		if !ok {
			return nil, fmt.Errorf("webhook %s: not in the description", k)
		}
		keep[string(k)] = h
	}
	sub := map[string]any{
		"openapi":  doc["openapi"],
		"info":     doc["info"],
		"webhooks": keep,
	}
	return withComponents(sub, doc)
}

// withComponents strips examples from sub and adds every component it
// references, transitively.
func withComponents(sub, doc map[string]any) (map[string]any, error) {
	comps, _ := doc["components"].(map[string]any)
	out := map[string]any{}
	var queue []string
	seen := map[string]bool{}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			m := map[string]any{}
			for k, x := range v {
				if k == "examples" || k == "example" {
					continue
				}
				if s, ok := x.(string); ok && k == "$ref" && !seen[s] {
					seen[s] = true
					queue = append(queue, s)
				}
				m[k] = walk(x)
			}
			return m
		case []any:
			l := make([]any, len(v))
			for i, x := range v {
				l[i] = walk(x)
			}
			return l
		}
		return v
	}
	res := walk(sub).(map[string]any)
	for len(queue) > 0 {
		ref := queue[0]
		queue = queue[1:]
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		if !strings.HasPrefix(ref, "#/components/") || len(parts) != 2 {
			return nil, fmt.Errorf("reference %s: not a component", ref)
		}
		kind, _ := comps[parts[0]].(map[string]any)
		c, ok := kind[parts[1]]
		if !ok {
			return nil, fmt.Errorf("reference %s: missing", ref)
		}
		if out[parts[0]] == nil {
			out[parts[0]] = map[string]any{}
		}
		out[parts[0]].(map[string]any)[parts[1]] = walk(c)
	}
	res["components"] = out
	return res, nil
}

func writeGz(path string, v any) error {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	enc := json.NewEncoder(zw)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
