package testreq

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// clearEnv unsets every variable Required reads, for the test.
func clearEnv(t *testing.T) {
	for _, k := range []string{"CI", "HARVEST_REQUIRE", "HARVEST_REQUIRE_BACKENDS", "HARVEST_REQUIRE_CLIS"} {
		t.Setenv(k, "")
	}
}

func TestRequired(t *testing.T) {
	cases := []struct {
		env  map[string]string
		req  Req
		want bool
	}{
		{nil, Disks, false},
		{map[string]string{"CI": "true"}, Disks, true},
		{map[string]string{"CI": "woodpecker"}, Postgres, true},
		{map[string]string{"CI": "false"}, Disks, false},
		{map[string]string{"CI": "0"}, Disks, false},
		{map[string]string{"HARVEST_REQUIRE": "disks,mounts"}, Mounts, true},
		{map[string]string{"HARVEST_REQUIRE": "disks,mounts"}, Docker, false},
		{map[string]string{"HARVEST_REQUIRE": " disks , cgroups "}, Cgroups, true},
		{map[string]string{"HARVEST_REQUIRE": "all"}, Toolchains, true},
		{map[string]string{"HARVEST_REQUIRE_BACKENDS": "local,docker+runsc"}, DockerRunsc, true},
		{map[string]string{"HARVEST_REQUIRE_BACKENDS": "local,docker+runsc"}, Docker, false},
		{map[string]string{"HARVEST_REQUIRE_CLIS": "1"}, CLIs, true},
		{map[string]string{"HARVEST_REQUIRE_CLIS": "1"}, Chromium, true},
		{map[string]string{"HARVEST_REQUIRE_CLIS": "1"}, Postgres, false},
		{map[string]string{"HARVEST_REQUIRE_CLIS": "0"}, CLIs, false},
		// A typo must not turn a requirement off.
		{map[string]string{"HARVEST_REQUIRE": "disk"}, Disks, true},
		{nil, Req("nope"), true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.env, c.req), func(t *testing.T) {
			clearEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if got := Required(c.req); got != c.want {
				t.Errorf("Required(%s) with %v = %v, want %v", c.req, c.env, got, c.want)
			}
		})
	}
}

func TestEveryReqSaysWhatInstallsIt(t *testing.T) {
	seen := map[Req]bool{}
	for _, r := range All {
		if seen[r] {
			t.Errorf("%s twice in All", r)
		}
		seen[r] = true
		if r.Install() == "no such requirement" {
			t.Errorf("%s: Install says nothing", r)
		}
	}
}

// recorder is a testing.TB that records how the test would end: Fatalf
// and Skipf end the goroutine, as the testing package's do.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(f func(tb testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestUnavailable(t *testing.T) {
	cases := []struct {
		name          string
		env           map[string]string
		req           Req
		failed        bool
		wantInMessage []string
	}{
		{"skipped", nil, Disks, false, []string{"no loop devices", `requirement "disks" unavailable`, "e2fsprogs", "HARVEST_REQUIRE=disks"}},
		{"CI", map[string]string{"CI": "true"}, Disks, true, []string{"no loop devices", `"disks" is required here (CI=true)`, "e2fsprogs"}},
		{"named", map[string]string{"HARVEST_REQUIRE": "mounts,disks"}, Disks, true, []string{"HARVEST_REQUIRE"}},
		{"alias", map[string]string{"HARVEST_REQUIRE_BACKENDS": "docker"}, Docker, true, []string{"harvest/base:bookworm"}},
		{"other named", map[string]string{"HARVEST_REQUIRE": "mounts"}, Disks, false, nil},
		{"typo", map[string]string{"HARVEST_REQUIRE": "disk"}, Mounts, true, []string{`$HARVEST_REQUIRE names "disk"`, "disks, mounts"}},
		{"unknown req", nil, Req("loop"), true, []string{`"loop" is no requirement`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			r := run(func(tb testing.TB) { Unavailable(tb, c.req, "no loop devices: %s", "/dev/loop-control") })
			if r.failed != c.failed || r.skipped == c.failed {
				t.Fatalf("failed %v skipped %v, want failed %v: %s", r.failed, r.skipped, c.failed, r.msg)
			}
			for _, w := range c.wantInMessage {
				if !strings.Contains(r.msg, w) {
					t.Errorf("message %q does not say %q", r.msg, w)
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	clearEnv(t)
	if r := run(func(tb testing.TB) { Check(tb, Cgroups, nil) }); r.failed || r.skipped {
		t.Errorf("Check with no error ended the test: %s", r.msg)
	}
	r := run(func(tb testing.TB) { Check(tb, Cgroups, fmt.Errorf("no memory controller")) })
	if !r.skipped || !strings.Contains(r.msg, "no memory controller") {
		t.Errorf("Check with an error: skipped %v, %q", r.skipped, r.msg)
	}
}
