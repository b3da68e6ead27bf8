// Package testreq decides, in one place, whether a test that cannot run
// on this machine fails or skips.
//
// A test that needs something the machine may lack (root, a sandbox
// backend, loop devices, an agent CLI, PostgreSQL, ...) calls Unavailable
// with the requirement it lacks. Where that requirement is required the
// test fails; elsewhere it is skipped, saying what is missing and what
// installs it. Required decides, from the environment:
//
//   - CI set to anything but "", "0" or "false" (CI=true, as .ci/run and
//     most CI services set it; CI=woodpecker counts too): every
//     requirement is required. A suite run there cannot pass by skipping.
//   - HARVEST_REQUIRE, a comma-separated list of requirement names (see
//     the constants below), or "all": those are required.
//   - HARVEST_REQUIRE_BACKENDS (local, docker, docker+runsc; the older
//     name) and HARVEST_REQUIRE_CLIS=1 (the agent CLIs, Chromium and the
//     npm eventsource client: what scripts/setup's SKIP_CLIS=1 leaves out)
//     add to that list.
//
// A name in those lists that is no requirement fails every test that asks,
// so that a typo cannot turn a requirement off.
//
// Skipping is still right for a few tests by design (a helper process's
// test, run only in its child; a measurement that is opt-in; a backend
// that cannot pass a check and says so); those do not call Unavailable,
// and .ci/allowed-skips lists them, one pattern each, with the reason:
// internal/cmd/testreport fails a run with any other skip.
//
// This package imports only the standard library, so the tests of every
// package can use it.
package testreq

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// A Req is something a test needs from the machine, named as
// HARVEST_REQUIRE names it.
type Req string

// The requirements, each with what provides it (Install). Every test that
// can be skipped for want of one of these says which.
const (
	// Root: the tests run as root (mounts, chown, loop devices, bwrap
	// as Harvest runs it).
	Root Req = "root"
	// Local: the local sandbox backend (bubblewrap, cgroups, root, the
	// agent binary), as `harvest doctor` checks it.
	Local Req = "local"
	// Docker: a running dockerd and the base image harvest/base:bookworm
	// (or $HARVEST_TEST_DOCKER_IMAGE).
	Docker Req = "docker"
	// DockerRunsc: the docker backend under gVisor (runsc registered with
	// dockerd).
	DockerRunsc Req = "docker+runsc"
	// Disks: disk limits (loop devices through /dev/loop-control,
	// mkfs.ext4, the kernel's ext4, root).
	Disks Req = "disks"
	// Mounts: mounting tmpfs and overlayfs (root, in a mount namespace
	// that allows it).
	Mounts Req = "mounts"
	// Cgroups: a cgroup hierarchy with the memory, pids and freezer
	// controllers (v1) or a cgroup2 root, writable.
	Cgroups Req = "cgroups"
	// Subreaper: prctl(PR_SET_CHILD_SUBREAPER).
	Subreaper Req = "subreaper"
	// Unshare: util-linux's unshare, to start a process as PID 1 of a new
	// PID namespace.
	Unshare Req = "unshare"
	// Git: git on PATH and the module a git checkout.
	Git Req = "git"
	// CLIs: the pinned agent CLIs, Claude Code and OpenCode, installed
	// under /opt/harvest/npm.
	CLIs Req = "clis"
	// Chromium: a headless Chromium for the browser tests.
	Chromium Req = "chromium"
	// EventSource: node and the npm eventsource client, pinned, under
	// /opt/harvest/npm.
	EventSource Req = "eventsource"
	// NPM: node and npm, with the npm registry reachable (npm install).
	NPM Req = "npm"
	// Postgres: PostgreSQL 15's initdb and postgres.
	Postgres Req = "postgres"
	// Netns: network namespaces, veth pairs and bridges (iproute2's ip,
	// root), iptables in a namespace (the statistic match for loss),
	// util-linux's unshare and the nats-server binary: the separate
	// machines of internal/netlab.
	Netns Req = "netns"
	// Toolchains: what the real repositories' own suites need: go, node
	// and npm, Debian's python3 with venv and the setuptools and wheel
	// wheels.
	Toolchains Req = "toolchains"
	// S3: versitygw, a real S3-compatible server (internal/testbin's
	// S3Server), for the object store of workspace checkpoints.
	S3 Req = "s3"
)

// All lists every requirement, in the order above.
var All = []Req{Root, Local, Docker, DockerRunsc, Disks, Mounts, Cgroups, Subreaper, Unshare, Git,
	CLIs, Chromium, EventSource, NPM, Postgres, Netns, Toolchains, S3}

// Install says what provides r, for the message of a test that lacks it.
func (r Req) Install() string {
	switch r {
	case Root:
		return "run the tests as root"
	case Local:
		return "as root, scripts/setup installs bubblewrap; `harvest doctor` says what else is missing"
	case Docker:
		return "scripts/setup installs docker.io, starts dockerd and builds the image harvest/base:bookworm"
	case DockerRunsc:
		return "scripts/setup installs runsc and registers it with dockerd"
	case Disks:
		return "as root, scripts/setup installs e2fsprogs (mkfs.ext4) and makes sure /dev/loop-control exists (modprobe loop)"
	case Mounts:
		return "run the tests as root where mounting tmpfs and overlayfs is allowed (a container needs CAP_SYS_ADMIN)"
	case Cgroups:
		return "run the tests as root with a writable cgroup hierarchy (memory, pids and freezer on v1, or cgroup2)"
	case Subreaper:
		return "a Linux kernel with PR_SET_CHILD_SUBREAPER (3.4+)"
	case Unshare:
		return "apt-get install util-linux"
	case Git:
		return "run the tests in a git checkout, with git installed (scripts/setup installs it)"
	case CLIs:
		return "scripts/setup installs the pinned CLIs into /opt/harvest/npm"
	case Chromium:
		return "scripts/setup installs chromium"
	case EventSource:
		return "scripts/setup installs nodejs and the pinned eventsource into /opt/harvest/npm"
	case NPM:
		return "scripts/setup installs nodejs and npm; npm install needs the npm registry"
	case Postgres:
		return "scripts/setup installs postgresql-15"
	case Netns:
		return "as root, scripts/setup installs iproute2, iptables, util-linux and nats-server"
	case Toolchains:
		return "scripts/setup installs nodejs, npm, python3-venv and python3-wheel-whl (go is the one running the tests)"
	case S3:
		return "scripts/setup builds versitygw from the Go module proxy into /opt/harvest/bin (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)"
	}
	return "no such requirement"
}

func (r Req) known() bool { return slices.Contains(All, r) }

// CI reports whether $CI says this is a CI run: set, and not "0" or
// "false". There every requirement is required.
func CI() bool {
	v := strings.TrimSpace(os.Getenv("CI"))
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

// Required reports whether a machine without r fails the tests that need
// it, rather than skipping them: in CI (see CI), or when HARVEST_REQUIRE
// names r or is "all", or when an alias does (HARVEST_REQUIRE_BACKENDS,
// HARVEST_REQUIRE_CLIS=1). An unknown r, or an unknown name in those
// variables, counts as required: Unavailable then says what is wrong.
func Required(r Req) bool {
	if CI() || !r.known() {
		return true
	}
	names, bad := named()
	return len(bad) > 0 || slices.Contains(names, "all") || slices.Contains(names, string(r))
}

// named returns the names the environment requires, and those that are no
// requirement's.
func named() (names, bad []string) {
	for _, env := range []string{"HARVEST_REQUIRE", "HARVEST_REQUIRE_BACKENDS"} {
		for n := range strings.SplitSeq(os.Getenv(env), ",") {
			n = strings.TrimSpace(n)
			switch {
			case n == "":
			case n == "all" || Req(n).known():
				names = append(names, n)
			default:
				bad = append(bad, fmt.Sprintf("$%s names %q", env, n))
			}
		}
	}
	switch v := os.Getenv("HARVEST_REQUIRE_CLIS"); v {
	case "", "0":
	case "1":
		names = append(names, string(CLIs), string(Chromium), string(EventSource))
	default:
		bad = append(bad, fmt.Sprintf("$HARVEST_REQUIRE_CLIS is %q (1 or nothing)", v))
	}
	return names, bad
}

// Names lists the requirement names, for messages.
func Names() string {
	s := make([]string, len(All))
	for i, r := range All {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// Unavailable ends t for want of r: it fails when r is required here, and
// is skipped otherwise; either way the message says what is missing
// (format and args) and what provides it.
func Unavailable(t testing.TB, r Req, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if !r.known() {
		t.Fatalf("%s; and testreq: %q is no requirement (the names are %s)", msg, r, Names())
	}
	if _, bad := named(); len(bad) > 0 {
		t.Fatalf("%s; and testreq: %s, which is no requirement: the names are %s, or all", msg, strings.Join(bad, ", "), Names())
	}
	if Required(r) {
		t.Fatalf("%s\nrequirement %q is required here (%s): %s", msg, r, why(), r.Install())
	}
	t.Skipf("%s\nrequirement %q unavailable: %s (with CI=true or HARVEST_REQUIRE=%s this fails)", msg, r, r.Install(), r)
}

// why says what made a requirement required.
func why() string {
	if CI() {
		return "CI=" + os.Getenv("CI")
	}
	names, _ := named()
	if slices.Contains(names, "all") {
		return "HARVEST_REQUIRE names all"
	}
	return "HARVEST_REQUIRE or an alias names it"
}

// NeedRoot ends t as Unavailable(Root) unless the test runs as root; what
// says what root is needed for.
func NeedRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, Root, "%s: needs root", what)
	}
}

// Check ends t as Unavailable(r) when err is not nil (a probe's answer,
// such as a backend's Available or disk.Check).
func Check(t testing.TB, r Req, err error) {
	t.Helper()
	if err != nil {
		Unavailable(t, r, "%v", err)
	}
}
