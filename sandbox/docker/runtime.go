package docker

import (
	"context"
	"fmt"
	"slices"

	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/sandbox"
)

// RuntimeCaveats are what a box cannot rely on under an OCI runtime that it
// can under runc, keyed by the conformance check that shows it (package
// sandboxtest's Check* names: the suite skips exactly those for that
// runtime, saying why, and harvest doctor lists them). Measured with
// Debian's runsc 0.0~20221219.
var RuntimeCaveats = map[string]map[string]string{
	"runsc": {
		"TCPSplice": "gVisor corrupts data spliced from one TCP socket to another past the first 64 KiB: " +
			"a box program that copies between two TCP connections with splice(2) (Go's io.Copy does) passes on wrong bytes",
		"ForkBomb": "box processes are not host processes under gVisor, so the pids limit bounds the sentry's threads, " +
			"not the box's processes: the memory limit is what stops a fork bomb, and a box whose sentry runs out of threads dies",
		"MemoryBomb": "gVisor has no OOM killer of its own: over its memory limit the host kills the sentry, " +
			"that is the whole box, not the one command (its commands then fail with a lost connection)",
		"HostPIDs": "box processes are tasks of the gVisor sentry, not host processes: the host's ps and /proc do not show them " +
			"(Destroy ends the sentry and the gofer, which hold them all)",
	},
}

// runtimeNotes are what a runtime breaks that no check of the suite
// catches, said by harvest doctor with RuntimeCaveats.
var runtimeNotes = map[string][]string{
	"runsc": {
		"gVisor 20221219 rejects statx(2) with AT_NO_AUTOMOUNT (EINVAL): Debian bookworm's ls and stat fail with \"Invalid argument\" in a box " +
			"(cp, mv, find, git and Go, Python or Node programs work); a newer runsc may not (not measured)",
		"runsc has no update command, so a running box's limits cannot change: warm boxes (harvest serve --pool) serve only boxes " +
			"with the default limits and no disk (gVisor does not see a disk mounted at /tmp or HOME after the start); others start cold",
	},
}

// Caveats lists what boxes of this provider cannot rely on (none under
// runc), for harvest doctor.
func (p *Provider) Caveats() []string {
	var out []string
	for _, why := range RuntimeCaveats[p.cfg.Runtime] {
		out = append(out, why)
	}
	slices.Sort(out)
	return append(out, runtimeNotes[p.cfg.Runtime]...)
}

// checkRuntime checks that dockerd knows Config.Runtime.
func (p *Provider) checkRuntime(ctx context.Context, cli *client.Client) error {
	if p.cfg.Runtime == "" {
		return nil
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return &sandbox.UnavailableError{Backend: Name, Reason: fmt.Sprintf("asking dockerd for its runtimes: %v", err)}
	}
	if rt, ok := info.Info.Runtimes[p.cfg.Runtime]; ok {
		if p.cfg.Runtime != "runsc" || rt.Path == "" {
			return nil // a shim v2 runtime: its options are not shown
		}
		// Without it the agent's socket is not reachable from the host,
		// and Start would wait for it in vain.
		for _, a := range rt.Args {
			if a == "--host-uds=create" || a == "--host-uds=all" {
				return nil
			}
		}
		return &sandbox.UnavailableError{Backend: Name,
			Reason: fmt.Sprintf("dockerd runs runsc without --host-uds=create (runtimeArgs %q): the box's agent socket would not be reachable from the host", rt.Args),
			Fix:    `add "--host-uds=create" (and "--network=none") to runsc's "runtimeArgs" in /etc/docker/daemon.json and send dockerd SIGHUP, or run scripts/setup`}
	}
	var have []string
	for name := range info.Info.Runtimes {
		have = append(have, name)
	}
	slices.Sort(have)
	fix := fmt.Sprintf(`register it in /etc/docker/daemon.json ("runtimes": {%q: {"path": "/usr/bin/%s"}}) and send dockerd SIGHUP`, p.cfg.Runtime, p.cfg.Runtime)
	if p.cfg.Runtime == "runsc" {
		fix = "install gVisor (apt-get install runsc) and run scripts/setup, which registers it with dockerd (--network=none --host-uds=create)"
	}
	return &sandbox.UnavailableError{Backend: Name, Reason: fmt.Sprintf("dockerd has no runtime %q (it has %v)", p.cfg.Runtime, have), Fix: fix}
}
