package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json), build events
// included.
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	ImportPath  string // build-output and build-fail
}

// A Checker reads go test -json's events line by line, prints what go test
// would (the output of every failed test in full, a line per package) to
// out, and keeps what the run's verdict needs. Feed it with Line, then ask
// Finish.
type Checker struct {
	out     io.Writer
	allowed *Allowed

	pkgs   map[string]*pkgState
	order  []string                    // packages in the order they started
	builds map[string]*strings.Builder // build output by ImportPath

	failures    []string // "pkg TestX", "pkg [build failed]", ...
	skips       []skip   // not on the allowed list
	allowedSeen []skip
	passed      int
	testsFailed int
	nonJSON     int
}

type pkgState struct {
	out    strings.Builder             // package-level output
	tests  map[string]*strings.Builder // output of tests running
	ended  map[string]bool             // tests that have a result
	result string                      // pass, fail, skip; "" while running
}

type skip struct {
	pkg, test, msg string
	entry          *allowEntry
}

// NewChecker returns a Checker printing to out that lets the skips of
// allowed through (nil: none).
func NewChecker(out io.Writer, allowed *Allowed) *Checker {
	return &Checker{out: out, allowed: allowed, pkgs: map[string]*pkgState{}, builds: map[string]*strings.Builder{}}
}

// Line takes one line of go test -json's output. A line that is no event
// (go's own messages on stderr, when it is merged in) is printed as is.
func (c *Checker) Line(line []byte) {
	var ev event
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
		c.nonJSON++
		fmt.Fprintf(c.out, "%s\n", line)
		return
	}
	switch ev.Action {
	case "build-output":
		b := c.builds[ev.ImportPath]
		if b == nil {
			b = &strings.Builder{}
			c.builds[ev.ImportPath] = b
		}
		b.WriteString(ev.Output)
		return
	case "build-fail":
		fmt.Fprint(c.out, c.builds[ev.ImportPath])
		delete(c.builds, ev.ImportPath)
		return
	}
	if ev.Package == "" {
		return
	}
	p := c.pkgs[ev.Package]
	if p == nil {
		p = &pkgState{tests: map[string]*strings.Builder{}, ended: map[string]bool{}}
		c.pkgs[ev.Package] = p
		c.order = append(c.order, ev.Package)
	}
	if ev.Test == "" {
		c.packageEvent(ev, p)
	} else {
		c.testEvent(ev, p)
	}
}

func (c *Checker) testEvent(ev event, p *pkgState) {
	switch ev.Action {
	case "run":
		p.tests[ev.Test] = &strings.Builder{}
	case "output":
		b := p.tests[ev.Test]
		if b == nil {
			if p.ended[ev.Test] {
				// Late output of a finished test: the package's.
				p.out.WriteString(ev.Output)
				return
			}
			b = &strings.Builder{}
			p.tests[ev.Test] = b
		}
		b.WriteString(ev.Output)
	case "pass", "fail", "skip":
		out := p.tests[ev.Test]
		delete(p.tests, ev.Test)
		p.ended[ev.Test] = true
		text := ""
		if out != nil {
			text = out.String()
		}
		switch ev.Action {
		case "pass":
			c.passed++
		case "fail":
			fmt.Fprint(c.out, text)
			c.testsFailed++
			c.failures = append(c.failures, ev.Package+" "+ev.Test)
		case "skip":
			s := skip{pkg: ev.Package, test: ev.Test, msg: skipMessage(text)}
			if s.entry = c.allowed.match(ev.Package, ev.Test); s.entry != nil {
				s.entry.seen++
				c.allowedSeen = append(c.allowedSeen, s)
				return
			}
			c.skips = append(c.skips, s)
			fmt.Fprintf(c.out, "--- SKIP (not on the allowed list): %s %s\n%s\n", ev.Package, ev.Test, indent(s.msg))
		}
	}
}

func (c *Checker) packageEvent(ev event, p *pkgState) {
	switch ev.Action {
	case "output":
		p.out.WriteString(ev.Output)
	case "pass":
		p.result = "pass"
		c.unfinished(ev.Package, p)
		line := fmt.Sprintf("ok  \t%s\t%.3fs", ev.Package, ev.Elapsed)
		for l := range strings.Lines(p.out.String()) {
			if strings.HasPrefix(l, "ok  \t") {
				line = strings.TrimSuffix(l, "\n")
			}
		}
		fmt.Fprintln(c.out, line)
	case "skip": // no test files
		p.result = "skip"
		fmt.Fprint(c.out, p.out.String())
	case "fail":
		p.result = "fail"
		c.unfinished(ev.Package, p)
		fmt.Fprint(c.out, p.out.String())
		switch {
		case ev.FailedBuild != "":
			c.failures = append(c.failures, ev.Package+" [build failed: "+ev.FailedBuild+"]")
		case !slices.ContainsFunc(c.failures, func(f string) bool { return strings.HasPrefix(f, ev.Package+" ") }):
			// Failed outside any test: TestMain, a panic, a race
			// reported after the tests, a timeout.
			c.failures = append(c.failures, ev.Package+" (outside any test: its output is above)")
		}
	}
}

// unfinished reports the tests of a package that ended without a result
// (a panic or a timeout elsewhere ended the test binary), with their
// output, as failures.
func (c *Checker) unfinished(pkg string, p *pkgState) {
	names := make([]string, 0, len(p.tests))
	for name := range p.tests {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(c.out, "%s--- NO RESULT: %s (the test binary ended while it ran)\n", p.tests[name], name)
		c.testsFailed++
		c.failures = append(c.failures, pkg+" "+name+" (no result)")
		delete(p.tests, name)
	}
}

// skipMessage is a skipped test's output without go test's own lines, its
// log lines' indentation trimmed.
func skipMessage(out string) string {
	var b strings.Builder
	for l := range strings.Lines(out) {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		b.WriteString(t + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func indent(s string) string {
	if s == "" {
		return "    (no message)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// Finish prints the run's summary and reports whether it passed: at least
// one package ran, every package has a result, none failed (a build
// failure included) and every skip is on the allowed list.
func (c *Checker) Finish() bool {
	for _, pkg := range c.order {
		if p := c.pkgs[pkg]; p.result == "" {
			c.unfinished(pkg, p)
			fmt.Fprint(c.out, p.out.String())
			c.failures = append(c.failures, pkg+" (no result: go test stopped before it ended)")
		}
	}
	// Build output with no build-fail after it (go test stopped).
	for path, b := range c.builds {
		fmt.Fprint(c.out, b)
		c.failures = append(c.failures, path+" (build output without a result)")
	}
	var ok, failed, noTests int
	for _, p := range c.pkgs {
		switch p.result {
		case "pass":
			ok++
		case "skip":
			noTests++
		default:
			failed++
		}
	}
	fmt.Fprintf(c.out, "\ntestreport: %d packages: %d ok, %d failed, %d without tests; tests: %d passed, %d failed, %d skipped (%d of them allowed)\n",
		len(c.pkgs), ok, failed, noTests, c.passed, c.testsFailed, len(c.skips)+len(c.allowedSeen), len(c.allowedSeen))
	if len(c.allowedSeen) > 0 {
		fmt.Fprintln(c.out, "\nAllowed skips:")
		for _, s := range c.allowedSeen {
			fmt.Fprintf(c.out, "  %s %s (%s: %s)\n", s.pkg, s.test, s.entry.where, s.entry.reason)
		}
	}
	if len(c.skips) > 0 {
		fmt.Fprintln(c.out, "\nSKIPPED, and not on the allowed list (make the test's requirement available, or gate the skip with internal/testreq; list it only when it skips by design):")
		for _, s := range c.skips {
			fmt.Fprintf(c.out, "  %s %s\n%s\n", s.pkg, s.test, indent(s.msg))
		}
	}
	if len(c.failures) > 0 {
		fmt.Fprintln(c.out, "\nFAILED:")
		for _, f := range c.failures {
			fmt.Fprintln(c.out, "  "+f)
		}
	}
	pass := len(c.pkgs) > 0 && len(c.failures) == 0 && len(c.skips) == 0
	switch {
	case len(c.pkgs) == 0:
		fmt.Fprintln(c.out, "\nFAIL: no package's events were read: did go test run, with -json?")
	case pass:
		fmt.Fprintln(c.out, "\nPASS")
	default:
		fmt.Fprintln(c.out, "\nFAIL")
	}
	return pass
}
