// Command extract pins GitHub's published OpenAPI descriptions, whole, as
// the stand-in's test data (package ghschema): the REST description
// (generated/api.github.com.json of @octokit/openapi) and the webhooks
// one (the same file of @octokit/openapi-webhooks), each gzipped as it
// is, with a note of where it came from and the SHA-256 of its content:
//
//	go run ./sim/ghsim/internal/extract \
//	    -rest /tmp/octo/octokit-openapi-23.0.2.tgz \
//	    -webhooks /tmp/octo/octokit-openapi-webhooks-12.1.0.tgz \
//	    -out sim/ghsim/ghschema/descriptions
//
// The tarballs are `npm pack @octokit/openapi@23.0.2` and
// `npm pack @octokit/openapi-webhooks@12.1.0`; each is checked against the
// npm integrity pinned below before it is read. Nothing is cut: what the
// stand-in serves is checked against everything GitHub describes.
//
// With -examples (`npm pack @octokit/webhooks-examples@7.6.1`: recorded
// payloads of real deliveries, from octokit/webhooks) it also writes
// webhook-examples.json.gz: the examples of the events Harvest handles
// (exampleEvents), every action, as the package has them (package ghbot
// parses each). No @octokit package pins an examples version to an
// openapi-webhooks one; 7.6.1 is the package's latest, the one current
// with openapi-webhooks 12.x. Without -examples the examples' note in
// SOURCE.json is kept as it was.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Source names one pinned npm tarball and the file taken from it.
type Source struct {
	Package   string `json:"package"`
	Version   string `json:"version"`
	Integrity string `json:"integrity"` // npm's: "sha512-" + base64, of the tarball
	File      string `json:"file"`      // inside the tarball
	Pinned    string `json:"pinned"`    // the gzipped copy written
	SHA256    string `json:"sha256"`    // of the file's content (set when written)
}

// The pins. Changing a version means a new integrity; the tool refuses a
// tarball whose digest differs.
var (
	restSource = Source{
		Package:   "@octokit/openapi",
		Version:   "23.0.2",
		Integrity: "sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4lnw7u5eZGNmwRNkBC3D7gZXbFx5AHzLUVRBXGDhg==",
		File:      "package/generated/api.github.com.json",
		Pinned:    "api.github.com.json.gz",
	}
	examplesSource = Source{
		Package:   "@octokit/webhooks-examples",
		Version:   "7.6.1",
		Integrity: "sha512-De6U3XB6O3DtCa7bKgCMzTHdeopqqZ6SNivMYJnK65ierKL1AnNIA0tkRYCRS7lwGT792d+Ps1WbfHlso6MynQ==",
		File:      "package/api.github.com/index.json",
		Pinned:    "webhook-examples.json.gz",
	}
	webhooksSource = Source{
		Package:   "@octokit/openapi-webhooks",
		Version:   "12.1.0",
		Integrity: "sha512-Z5eDsLCUNbx1zHpZb1LNQirADqdMTvWJQ/deahi0ws+tWWnwHXB+Pr4jfmM9OrETS9Y5iW8ZRu1fdbudObhLrg==",
		File:      "package/generated/api.github.com.json",
		Pinned:    "webhooks.api.github.com.json.gz",
	}
)

// exampleEvents are the events Harvest's webhook side handles (package
// ghbot), whose recorded examples are kept.
var exampleEvents = []string{"issue_comment", "issues", "pull_request", "pull_request_review",
	"pull_request_review_comment", "check_suite", "installation", "installation_repositories", "push"}

func main() {
	rest := flag.String("rest", "", "the @octokit/openapi tarball (npm pack)")
	hooks := flag.String("webhooks", "", "the @octokit/openapi-webhooks tarball (npm pack)")
	examples := flag.String("examples", "", "the @octokit/webhooks-examples tarball (npm pack); optional")
	out := flag.String("out", "sim/ghsim/ghschema/descriptions", "directory to write the pinned descriptions to")
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
	var srcs []Source
	for _, p := range []struct {
		tgz string
		src Source
	}{{restTGZ, restSource}, {hooksTGZ, webhooksSource}} {
		b, err := readPinned(p.tgz, p.src)
		if err != nil {
			return err
		}
		if !json.Valid(b) {
			return fmt.Errorf("%s: %s is not JSON", p.tgz, p.src.File)
		}
		sum := sha256.Sum256(b)
		p.src.SHA256 = hex.EncodeToString(sum[:])
		if err := writeGz(filepath.Join(out, p.src.Pinned), b); err != nil {
			return err
		}
		srcs = append(srcs, p.src)
	}
	note := map[string]any{
		"generator": "go run ./sim/ghsim/internal/extract",
		"rest":      srcs[0],
		"webhooks":  srcs[1],
	}
	if examplesTGZ != "" {
		raw, err := readPinned(examplesTGZ, examplesSource)
		if err != nil {
			return err
		}
		var all []map[string]any
		if err := json.Unmarshal(raw, &all); err != nil {
			return fmt.Errorf("%s: %s: %w", examplesTGZ, examplesSource.File, err)
		}
		var keep []map[string]any
		for _, name := range exampleEvents {
			for _, e := range all {
				if e["name"] == name {
					keep = append(keep, map[string]any{"name": name, "examples": e["examples"]})
				}
			}
		}
		if len(keep) != len(exampleEvents) {
			return fmt.Errorf("%s: %d of the %d events have examples", examplesTGZ, len(keep), len(exampleEvents))
		}
		b, _ := json.Marshal(keep)
		sum := sha256.Sum256(b)
		src := examplesSource
		src.SHA256 = hex.EncodeToString(sum[:])
		if err := writeGz(filepath.Join(out, src.Pinned), b); err != nil {
			return err
		}
		note["examples"], note["example_events"] = src, exampleEvents
	} else if b, err := os.ReadFile(filepath.Join(out, "SOURCE.json")); err == nil {
		var old map[string]any
		if json.Unmarshal(b, &old) == nil && old["examples"] != nil {
			note["examples"], note["example_events"] = old["examples"], old["example_events"]
		}
	}
	b, _ := json.MarshalIndent(note, "", "  ")
	return os.WriteFile(filepath.Join(out, "SOURCE.json"), append(b, '\n'), 0o644)
}

// readPinned checks the tarball's integrity and returns the file it pins.
func readPinned(path string, src Source) ([]byte, error) {
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
		if h.Name == src.File {
			return io.ReadAll(tr)
		}
	}
}

func writeGz(path string, b []byte) error {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
