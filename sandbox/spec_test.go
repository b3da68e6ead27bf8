package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testreq"
)

func TestValidate(t *testing.T) {
	ws := t.TempDir()
	os.Chmod(ws, 0o777)
	file := filepath.Join(ws, "file")
	os.WriteFile(file, nil, 0o644)
	locked := filepath.Join(ws, "locked")
	os.Mkdir(locked, 0o700)
	if os.Geteuid() == 0 {
		os.Chown(locked, 0, 0)
	}
	good := Spec{Workspaces: []Workspace{{Name: "w", HostPath: ws}}}
	cases := map[string]struct {
		spec Spec
		want string // "" = valid
	}{
		"defaults":         {Spec{}, ""},
		"workspace":        {good, ""},
		"root":             {Spec{User: User{UID: 0, GID: 5}}, "must not be root"},
		"bad id":           {Spec{ID: "../x"}, `id "../x"`},
		"missing":          {Spec{Workspaces: []Workspace{{Name: "w", HostPath: "/nope/nope"}}}, "does not exist: create it"},
		"relative":         {Spec{Workspaces: []Workspace{{Name: "w", HostPath: "rel"}}}, "use an absolute path"},
		"not a dir":        {Spec{Workspaces: []Workspace{{Name: "w", HostPath: file}}}, "is not a directory"},
		"not writable":     {Spec{Workspaces: []Workspace{{Name: "w", HostPath: locked}}}, "is not writable by the box user 1000:1000: run `chown -R 1000:1000"},
		"dup name":         {Spec{Workspaces: []Workspace{{Name: "w", HostPath: ws}, {Name: "w", HostPath: ws}}}, "given twice"},
		"bad name":         {Spec{Workspaces: []Workspace{{Name: "a/b", HostPath: ws}}}, `name "a/b"`},
		"env key":          {Spec{Env: map[string]string{"1X": "y"}}, `env "1X"`},
		"reserved env":     {Spec{Env: map[string]string{"HARVEST_AGENT_PROC": "1"}}, "reserved"},
		"env nul":          {Spec{Env: map[string]string{"X": "a\x00b"}}, "NUL"},
		"memory":           {Spec{Limits: Limits{MemoryBytes: 1000}}, "at least 32MiB"},
		"disk dir":         {Spec{DiskDir: ws}, ""},
		"disk dir missing": {Spec{DiskDir: "/nope/nope"}, "create the box's disk first"},
		"disk dir rel":     {Spec{DiskDir: "disk"}, "clean absolute path"},
		"disk dir file":    {Spec{DiskDir: file}, "is not a directory"},
		"pids":             {Spec{Limits: Limits{Pids: 2}}, "at least 8"},
		"cpus":             {Spec{Limits: Limits{CPUs: -1}}, "cpus -1"},
		"network":          {Spec{Network: "bridge"}, `only "none"`},
		"timeout":          {Spec{Timeout: -time.Second}, "timeout -1s"},
		"relative workdir": {Spec{Workdir: "x"}, "workdir"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if name == "not writable" {
				testreq.NeedRoot(t, "a workspace owned by root")
			}
			err := c.spec.WithDefaults().Validate()
			if c.want == "" {
				if err != nil {
					t.Error(err)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	// Several problems are reported together.
	err := Spec{User: User{UID: 0, GID: 0}, Network: "x", Limits: Limits{Pids: 1}}.Validate()
	if err == nil || strings.Count(err.Error(), "\n  - ") != 3 {
		t.Errorf("want three problems listed, got %v", err)
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "6g": 6 << 30, "6GiB": 6 << 30, "1k": 1024, "1048576": 1 << 20, "1.5g": 3 << 29, "2MB": 2 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1m", "1x"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
	if got := FormatSize(6 << 30); got != "6GiB" {
		t.Errorf("FormatSize: %s", got)
	}
}

func TestDefaults(t *testing.T) {
	s := Spec{Workspaces: []Workspace{{Name: "repo", HostPath: "/x"}}, Env: map[string]string{"PATH": "/bin"}}.WithDefaults()
	if s.Workdir != "/workspace/repo" || s.User != (User{1000, 1000}) || s.Limits.MemoryBytes != 6<<30 ||
		s.Limits.Pids != 1024 || s.Network != NetworkNone || s.Timeout != 24*time.Hour || s.Env["PATH"] != "/bin" || s.Env["HOME"] != "/home/user" {
		t.Errorf("defaults: %+v", s)
	}
}
