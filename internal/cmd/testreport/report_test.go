package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The streams below are what go test -json (Go 1.26) writes, trimmed of
// Time fields; each case is one kind of run the checker must judge.

const pkgA = "github.com/harvest-dev/harvest/sandbox/backends"

// ev is one event line.
func ev(action, pkg, test, output string) string {
	b, _ := json.Marshal(event{Action: action, Package: pkg, Test: test, Output: output})
	return string(b)
}

// passingTest is the events of a test that passes, logging a line.
func passingTest(pkg, test string) []string {
	return []string{
		ev("run", pkg, test, ""),
		ev("output", pkg, test, "=== RUN   "+test+"\n"),
		ev("output", pkg, test, "    x_test.go:3: hello\n"),
		ev("output", pkg, test, "--- PASS: "+test+" (0.00s)\n"),
		ev("pass", pkg, test, ""),
	}
}

func skippedTest(pkg, test, msg string) []string {
	return []string{
		ev("run", pkg, test, ""),
		ev("output", pkg, test, "=== RUN   "+test+"\n"),
		ev("output", pkg, test, "    x_test.go:9: "+msg+"\n"),
		ev("output", pkg, test, "        what installs it\n"),
		ev("output", pkg, test, "--- SKIP: "+test+" (0.00s)\n"),
		ev("skip", pkg, test, ""),
	}
}

func failingTest(pkg, test, msg string) []string {
	return []string{
		ev("run", pkg, test, ""),
		ev("output", pkg, test, "=== RUN   "+test+"\n"),
		ev("output", pkg, test, "    x_test.go:5: "+msg+"\n"),
		ev("output", pkg, test, "--- FAIL: "+test+" (0.00s)\n"),
		ev("fail", pkg, test, ""),
	}
}

func pkgPass(pkg string) []string {
	return []string{
		ev("output", pkg, "", "PASS\n"),
		ev("output", pkg, "", "ok  \t"+pkg+"\t0.006s\n"),
		`{"Action":"pass","Package":"` + pkg + `","Elapsed":0.007}`,
	}
}

func pkgFail(pkg string) []string {
	return []string{
		ev("output", pkg, "", "FAIL\n"),
		ev("output", pkg, "", "FAIL\t"+pkg+"\t0.006s\n"),
		`{"Action":"fail","Package":"` + pkg + `","Elapsed":0.007}`,
	}
}

func stream(parts ...[]string) string {
	var all []string
	for _, p := range parts {
		all = append(all, p...)
	}
	return strings.Join(all, "\n") + "\n"
}

func start(pkg string) []string { return []string{ev("start", pkg, "", "")} }

const allowedList = `# tests that skip by design
sandbox/backends  TestIsolation/host   the host backend has no isolation by design
session           TestCrashChild       run by TestCrashRecovery in a child process
`

func check(t *testing.T, in string) (bool, string) {
	t.Helper()
	dir := t.TempDir()
	allowed := filepath.Join(dir, "allowed-skips")
	if err := os.WriteFile(allowed, []byte(allowedList), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(dir, "out", "go-test.json")
	var out strings.Builder
	ok, err := run(strings.NewReader(in), &out, allowed, raw)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(raw)
	if err != nil || string(saved) != in {
		t.Errorf("the raw events saved are not the input: %v\n%s", err, saved)
	}
	return ok, out.String()
}

func TestReport(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		pass    bool
		want    []string // in the output, in this order
		notWant []string
	}{
		{
			name: "pass",
			in:   stream(start(pkgA), passingTest(pkgA, "TestA"), pkgPass(pkgA)),
			pass: true,
			want: []string{"ok  \t" + pkgA + "\t0.006s", "1 packages: 1 ok, 0 failed", "1 passed, 0 failed, 0 skipped", "PASS"},
			// A passing test's output is not printed, as go test does.
			notWant: []string{"hello", "FAIL"},
		},
		{
			name: "fail",
			in:   stream(start(pkgA), passingTest(pkgA, "TestA"), failingTest(pkgA, "TestB", "boom"), pkgFail(pkgA)),
			want: []string{"=== RUN   TestB\n    x_test.go:5: boom\n--- FAIL: TestB", "FAIL\t" + pkgA, "1 passed, 1 failed", "FAILED:\n  " + pkgA + " TestB\n", "\nFAIL\n"},
		},
		{
			name: "skip allowed",
			in:   stream(start(pkgA), passingTest(pkgA, "TestA"), skippedTest(pkgA, "TestIsolation/host", "no isolation"), pkgPass(pkgA)),
			pass: true,
			want: []string{"1 skipped (1 of them allowed)", "Allowed skips:\n  " + pkgA + " TestIsolation/host (", "allowed-skips:2: the host backend has no isolation by design)", "PASS"},
		},
		{
			name: "skip not allowed",
			in: stream(start(pkgA), passingTest(pkgA, "TestA"),
				skippedTest(pkgA, "TestIsolation/local", "disk limits unavailable here"), pkgPass(pkgA)),
			want: []string{"--- SKIP (not on the allowed list): " + pkgA + " TestIsolation/local\n    x_test.go:9: disk limits unavailable here\n    what installs it\n",
				"SKIPPED, and not on the allowed list", "  " + pkgA + " TestIsolation/local\n    x_test.go:9: disk limits unavailable here", "\nFAIL\n"},
			notWant: []string{"FAILED:"},
		},
		{
			// The allowed list names a package by its path's end, at an
			// element: "session" is not ".../mysession".
			name: "package pattern at a path element",
			in: stream(start("example.com/mysession"), skippedTest("example.com/mysession", "TestCrashChild", "child"), pkgPass("example.com/mysession"),
				start("example.com/x/session"), skippedTest("example.com/x/session", "TestCrashChild", "child"), pkgPass("example.com/x/session")),
			want: []string{"Allowed skips:\n  example.com/x/session TestCrashChild", "SKIPPED, and not on the allowed list", "  example.com/mysession TestCrashChild\n", "\nFAIL\n"},
		},
		{
			name: "build failure",
			in: stream([]string{
				`{"ImportPath":"` + pkgA + ` [` + pkgA + `.test]","Action":"build-output","Output":"# ` + pkgA + ` [` + pkgA + `.test]\n"}`,
				`{"ImportPath":"` + pkgA + ` [` + pkgA + `.test]","Action":"build-output","Output":"sandbox/backends/x_test.go:3:28: undefined: nope\n"}`,
				`{"ImportPath":"` + pkgA + ` [` + pkgA + `.test]","Action":"build-fail"}`,
			}, start(pkgA), []string{
				ev("output", pkgA, "", "FAIL\t"+pkgA+" [build failed]\n"),
				`{"Action":"fail","Package":"` + pkgA + `","Elapsed":0,"FailedBuild":"` + pkgA + ` [` + pkgA + `.test]"}`,
			}),
			want: []string{"x_test.go:3:28: undefined: nope", "FAIL\t" + pkgA + " [build failed]", "1 packages: 0 ok, 1 failed", "FAILED:\n  " + pkgA + " [build failed: ", "\nFAIL\n"},
		},
		{
			name: "a package with no tests",
			in: stream(start("example.com/c"), []string{
				ev("output", "example.com/c", "", "?   \texample.com/c\t[no test files]\n"),
				`{"Action":"skip","Package":"example.com/c","Elapsed":0}`,
			}, start(pkgA), passingTest(pkgA, "TestA"), pkgPass(pkgA)),
			pass: true,
			want: []string{"?   \texample.com/c\t[no test files]", "2 packages: 1 ok, 0 failed, 1 without tests", "0 skipped", "PASS"},
		},
		{
			name: "subtests",
			in: stream(start(pkgA), []string{
				ev("run", pkgA, "TestSub", ""),
				ev("output", pkgA, "TestSub", "=== RUN   TestSub\n"),
			}, passingTest(pkgA, "TestSub/ok_one"), skippedTest(pkgA, "TestSub/skipped", "why 1"), failingTest(pkgA, "TestSub/bad", "sub boom"), []string{
				ev("output", pkgA, "TestSub", "--- FAIL: TestSub (0.00s)\n"),
				ev("fail", pkgA, "TestSub", ""),
			}, pkgFail(pkgA)),
			want: []string{"--- SKIP (not on the allowed list): " + pkgA + " TestSub/skipped", "    x_test.go:5: sub boom\n--- FAIL: TestSub/bad", "--- FAIL: TestSub (0.00s)",
				"1 passed, 2 failed, 1 skipped (0 of them allowed)", "FAILED:\n  " + pkgA + " TestSub/bad\n  " + pkgA + " TestSub\n"},
		},
		{
			// go test's binary ended (a panic in another goroutine, a
			// timeout) while a test ran: it has no result.
			name: "a test without a result",
			in: stream(start(pkgA), []string{
				ev("run", pkgA, "TestHang", ""),
				ev("output", pkgA, "TestHang", "=== RUN   TestHang\n"),
				ev("output", pkgA, "", "panic: test timed out after 10m0s\n"),
			}, pkgFail(pkgA)),
			want: []string{"=== RUN   TestHang\n--- NO RESULT: TestHang", "panic: test timed out", "FAILED:\n  " + pkgA + " TestHang (no result)"},
		},
		{
			name: "a package failing outside its tests",
			in:   stream(start(pkgA), passingTest(pkgA, "TestA"), []string{ev("output", pkgA, "", "WARNING: DATA RACE\n")}, pkgFail(pkgA)),
			want: []string{"WARNING: DATA RACE", "FAILED:\n  " + pkgA + " (outside any test: its output is above)"},
		},
		{
			name: "events cut short",
			in:   stream(start(pkgA), passingTest(pkgA, "TestA"), []string{ev("run", pkgA, "TestB", ""), ev("output", pkgA, "TestB", "=== RUN   TestB\n")}),
			want: []string{"--- NO RESULT: TestB", "FAILED:\n  " + pkgA + " TestB (no result)\n  " + pkgA + " (no result: go test stopped before it ended)"},
		},
		{
			name: "no events",
			in:   "go: downloading example.com/x v1.0.0\n",
			want: []string{"go: downloading example.com/x v1.0.0\n", "no package's events were read"},
		},
		{
			name: "go's messages between events",
			in:   stream([]string{"go: downloading example.com/x v1.0.0"}, start(pkgA), passingTest(pkgA, "TestA"), pkgPass(pkgA)),
			pass: true,
			want: []string{"go: downloading example.com/x v1.0.0\nok  \t" + pkgA, "PASS"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pass, out := check(t, c.in)
			if pass != c.pass {
				t.Errorf("passed %v, want %v", pass, c.pass)
			}
			rest := out
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("the report does not say %q (after what came before it)", w)
					continue
				}
				rest = rest[i+len(w):]
			}
			for _, w := range c.notWant {
				if strings.Contains(out, w) {
					t.Errorf("the report says %q", w)
				}
			}
			if t.Failed() {
				t.Logf("the report:\n%s", out)
			}
		})
	}
}

func TestParseAllowed(t *testing.T) {
	a, err := ParseAllowed(strings.NewReader(allowedList+"\n  \ninternal/cli TestServeFailoverTime opt-in: set HARVEST_FAILOVER_KILLS\n"), "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pkg, test string
		want      bool
	}{
		{pkgA, "TestIsolation/host", true},
		{pkgA, "TestIsolation/host/sub", false}, // anchored
		{pkgA, "TestIsolation/local", false},
		{"github.com/harvest-dev/harvest/session", "TestCrashChild", true},
		{"github.com/harvest-dev/harvest/internal/cli", "TestServeFailoverTime", true},
	} {
		if got := a.match(c.pkg, c.test) != nil; got != c.want {
			t.Errorf("%s %s allowed: %v, want %v", c.pkg, c.test, got, c.want)
		}
	}
	for in, want := range map[string]string{
		"session TestCrashChild\n":    "list:1: \"session TestCrashChild\": want a package pattern, a test pattern and the reason",
		"# c\nsession Test( reason\n": "list:2: test pattern \"Test(\"",
		"sess(ion TestX reason\n":     "list:1: package pattern \"sess(ion\"",
	} {
		if _, err := ParseAllowed(strings.NewReader(in), "list"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAllowed(%q): %v, want an error saying %q", in, err, want)
		}
	}
}

// The checked-in list parses, and every entry gives a reason.
func TestCheckedInList(t *testing.T) {
	f, err := os.Open("../../../.ci/allowed-skips")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := ParseAllowed(f, ".ci/allowed-skips")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.entries) == 0 {
		t.Fatal(".ci/allowed-skips allows nothing")
	}
}
