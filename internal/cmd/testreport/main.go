// Command testreport checks a run of the whole suite: it reads
// `go test -json` on stdin, prints what go test would print (each failed
// test's output in full, an ok or FAIL line per package), saves the raw
// events, and exits 1 unless every package built and passed and every
// skipped test is on the allowed list (.ci/allowed-skips, see Allowed).
//
// Why: a test that cannot run here skips, and a suite whose tests all skip
// passes. In CI every requirement is required (internal/testreq), so a
// missing tool fails its tests instead; the skips left are the few that
// are right by design, and this command holds the run to that list.
//
//	set -o pipefail
//	CI=true go test -race -json ./... 2>&1 | go run ./internal/cmd/testreport -o .ci/out/go-test.json
//
// It cannot see go test's exit status: run it under pipefail, as .ci/run
// does, so that a go test that fails without saying so in its events
// still fails the run.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	allowedPath := flag.String("allowed", ".ci/allowed-skips", "the list of tests allowed to skip")
	rawPath := flag.String("o", "", "also write the raw go test -json input to this file")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go test -json ./... 2>&1 | testreport [-allowed FILE] [-o FILE]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ok, err := run(os.Stdin, os.Stdout, *allowedPath, *rawPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, allowedPath, rawPath string) (bool, error) {
	f, err := os.Open(allowedPath)
	if err != nil {
		return false, fmt.Errorf("the allowed skips: %w (give the list with -allowed)", err)
	}
	allowed, err := ParseAllowed(f, allowedPath)
	f.Close()
	if err != nil {
		return false, err
	}
	var raw *bufio.Writer
	if rawPath != "" {
		if err := os.MkdirAll(filepath.Dir(rawPath), 0o755); err != nil {
			return false, err
		}
		rf, err := os.Create(rawPath)
		if err != nil {
			return false, err
		}
		defer rf.Close()
		raw = bufio.NewWriter(rf)
	}
	c := NewChecker(out, allowed)
	r := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if raw != nil {
				raw.Write(line)
			}
			c.Line(trimEOL(line))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, fmt.Errorf("reading go test's output: %w", err)
		}
	}
	if raw != nil {
		if err := raw.Flush(); err != nil {
			return false, fmt.Errorf("saving the raw events: %w", err)
		}
		fmt.Fprintf(out, "testreport: the raw events are in %s\n", rawPath)
	}
	return c.Finish(), nil
}

func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
