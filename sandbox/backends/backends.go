// Package backends lists every sandbox backend Harvest has, in one place, and
// diagnoses which of them work on this machine (`harvest doctor`).
package backends

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/host"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// Options configure every backend. Zero values mean each backend's default.
type Options struct {
	// RunDir is a base directory; each backend uses RunDir/NAME.
	RunDir      string
	AgentBinary string
	// DockerHost and DockerImage configure the docker backend.
	DockerHost  string
	DockerImage string
	// DockerRuntime is the docker backend's OCI runtime ("" runc; "runsc"
	// for gVisor).
	DockerRuntime string
	// AllowUnsafeHost enables the host backend (no isolation).
	AllowUnsafeHost bool
	// LocalPool is how many idle shims the local backend keeps ready (faster
	// creates for a long-running process; 0 for one-shot use).
	LocalPool int
	// DockerPool is how many containers the docker backend keeps started
	// ahead of demand (the same trade; 0 for one-shot use).
	DockerPool int
	// Owner is the owner (package owner) the local and docker backends
	// record their new boxes with, held by the caller (a server's shared
	// owner). Empty: each provider's own instance, released with it.
	Owner string
}

// OwnersDir is where the owners' lock files of the backends opened with o
// are (package owner): one directory for all, beside their run dirs
// (owner.DirFor of each).
func (o Options) OwnersDir() string { return o.runDir("owners") }

func (o Options) runDir(name string) string {
	if o.RunDir == "" {
		return sandbox.DefaultRunDir(name)
	}
	return o.RunDir + "/" + name
}

// Backend is one registered backend.
type Backend struct {
	Name string
	// Isolating is false for the host backend.
	Isolating bool
	// Describe says what the backend is, for doctor and help.
	Describe string
	New      func(o Options) sandbox.Provider
}

// All lists every backend, the default first.
var All = []Backend{
	{
		Name: local.Name, Isolating: true,
		Describe: "Linux namespaces (bubblewrap) and cgroups; no daemon",
		New: func(o Options) sandbox.Provider {
			return local.New(local.Config{RunDir: o.runDir(local.Name), AgentBinary: o.AgentBinary, PoolSize: o.LocalPool, Owner: o.Owner})
		},
	},
	{
		Name: docker.Name, Isolating: true,
		Describe: "containers through the Docker Engine API",
		New: func(o Options) sandbox.Provider {
			return docker.New(docker.Config{RunDir: o.runDir(docker.Name), AgentBinary: o.AgentBinary, Host: o.DockerHost, Image: o.DockerImage, Runtime: o.DockerRuntime,
				Owner: o.Owner, PoolSize: o.DockerPool})
		},
	},
	{
		Name: host.Name, Isolating: false,
		Describe: "UNSAFE: commands run directly on this machine, no isolation",
		New: func(o Options) sandbox.Provider {
			return host.New(host.Config{RunDir: o.runDir(host.Name), AgentBinary: o.AgentBinary, AllowUnsafe: o.AllowUnsafeHost})
		},
	},
}

// Default is the backend used when none is named.
const Default = local.Name

// Names lists the backend names.
func Names() []string {
	out := make([]string, len(All))
	for i, b := range All {
		out[i] = b.Name
	}
	return out
}

// Lookup finds a backend by name.
func Lookup(name string) (Backend, error) {
	for _, b := range All {
		if b.Name == name {
			return b, nil
		}
	}
	names := Names()
	sort.Strings(names)
	return Backend{}, fmt.Errorf("unknown backend %q: choose one of %v", name, names)
}

// Open returns the named backend's provider. The host backend is refused
// unless o.AllowUnsafeHost.
func Open(name string, o Options) (sandbox.Provider, error) {
	b, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if !b.Isolating && !o.AllowUnsafeHost {
		return nil, sandbox.ErrUnsafeNotAllowed
	}
	return b.New(o), nil
}

// Report is doctor's verdict on one backend.
type Report struct {
	Backend   string `json:"backend"`
	Available bool   `json:"available"`
	Isolating bool   `json:"isolating"`
	Unsafe    bool   `json:"unsafe,omitempty"`
	Describe  string `json:"describe"`
	Reason    string `json:"reason,omitempty"`
	Fix       string `json:"fix,omitempty"`
	// Runtime is the docker backend's OCI runtime this report is for
	// ("" dockerd's default).
	Runtime string `json:"runtime,omitempty"`
	// Caveats are what boxes cannot rely on under Runtime
	// (docker.RuntimeCaveats).
	Caveats []string `json:"caveats,omitempty"`
	// Agent is the in-box agent binary the backend would use.
	Agent     string `json:"agent,omitempty"`
	CheckMS   int64  `json:"check_ms"`
	IsDefault bool   `json:"default,omitempty"`
}

// Runtimes are the docker backend's optional OCI runtimes Doctor checks,
// each with what it adds.
var Runtimes = map[string]string{
	"runsc": "gVisor: a user-space kernel between the box and the host's (docker --runtime runsc)",
}

// Doctor checks every backend, and the docker backend once more with each
// of Runtimes.
func Doctor(ctx context.Context, o Options) []Report {
	o.AllowUnsafeHost = true // diagnose it; using it still needs the opt-in
	out := make([]Report, 0, len(All)+len(Runtimes))
	agent, _ := sandbox.AgentBinary(o.AgentBinary)
	type check struct {
		b       Backend
		runtime string
	}
	var checks []check
	for _, b := range All {
		checks = append(checks, check{b, o.DockerRuntime})
		if b.Name == docker.Name {
			for rt := range Runtimes {
				if rt != o.DockerRuntime {
					checks = append(checks, check{b, rt})
				}
			}
		}
	}
	for _, c := range checks {
		b, o := c.b, o
		if b.Name == docker.Name {
			o.DockerRuntime = c.runtime
		}
		start := time.Now()
		p := b.New(o)
		err := p.Available(ctx)
		var caveats []string
		if c, ok := p.(interface{ Caveats() []string }); ok {
			caveats = c.Caveats()
		}
		if c, ok := p.(interface{ Close() error }); ok {
			c.Close()
		}
		r := Report{
			Backend: b.Name, Available: err == nil, Isolating: b.Isolating, Unsafe: !b.Isolating,
			Describe: b.Describe, Agent: agent, CheckMS: time.Since(start).Milliseconds(), IsDefault: b.Name == Default,
			Caveats: caveats,
		}
		if b.Name == docker.Name && o.DockerRuntime != "" {
			r.Runtime = o.DockerRuntime
			if d, ok := Runtimes[o.DockerRuntime]; ok {
				r.Describe = d
			}
		}
		if err != nil {
			r.Reason = err.Error()
			if ue, ok := err.(*sandbox.UnavailableError); ok {
				r.Reason, r.Fix = ue.Reason, ue.Fix
			}
		}
		out = append(out, r)
	}
	return out
}
