package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Limits bound a session. Zero values mean the server's defaults.
type Limits struct {
	IdleTimeout  time.Duration `json:"idle_timeout,omitempty"`
	MaxLifetime  time.Duration `json:"max_lifetime,omitempty"`
	TurnWatchdog time.Duration `json:"turn_watchdog,omitempty"`
	MemoryBytes  int64         `json:"memory_bytes,omitempty"`
	// DiskBytes and DiskInodes size the session's disk: its workspaces, and
	// its box's /tmp and HOME (package sandbox/disk).
	DiskBytes  int64   `json:"disk_bytes,omitempty"`
	DiskInodes int64   `json:"disk_inodes,omitempty"`
	MaxSteps   int     `json:"max_steps,omitempty"`
	BudgetUSD  float64 `json:"budget_usd,omitempty"`
}

// Enforcement says which of a session's resource limits its box is held
// to: the box it runs in, or, when it has none (suspended, ended), the
// last one it had. A limit shown in Limits but not enforced here is not a
// bound at all.
type Enforcement struct {
	// Memory: limits.memory_bytes is the box's memory limit (a cgroup's,
	// swap included). Every isolating backend sets it; the host backend
	// (no isolation) does not.
	Memory bool `json:"memory"`
	// Pids: the box's number of processes is bounded (the sandbox's
	// default), so a fork bomb stops at it.
	Pids bool `json:"pids"`
	// Disk: limits.disk_bytes and disk_inodes bound the session's
	// workspaces, /tmp and HOME, on a disk image of its own. False on a
	// server started with --no-disk-limits, for a session whose workspace
	// predates its disk, and on the host backend.
	Disk bool `json:"disk"`
}

// TerminalCLI is a generic interactive CLI for the terminal agent, and how
// it says a turn is over.
type TerminalCLI struct {
	// Command and its arguments, looked up in the box's PATH.
	Command []string `json:"command"`
	// DonePattern is a regular expression (Go syntax) matching the end of
	// what the CLI printed since the input, once it is ready for more:
	// typically its prompt.
	DonePattern string `json:"done_pattern,omitempty"`
	// ReadyPattern matches its output once it is ready for the first input
	// (default DonePattern).
	ReadyPattern string `json:"ready_pattern,omitempty"`
	// IdleTimeout ends a turn whose output has been quiet this long (the
	// fallback; default 30 min).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
}

// Durations on the wire: Limits and TerminalCLI write theirs as Go
// duration strings ("90s", "5m", "1h30m"), what people write and what
// openapi.json documents (a plain string schema, which generated clients
// can type; a union with integers they cannot), and read either that or
// integer nanoseconds (what time.Duration marshals to, which earlier
// versions wrote, and which stored sessions may still hold).

// MarshalJSON implements json.Marshaler: durations as strings.
func (l Limits) MarshalJSON() ([]byte, error) {
	type plain Limits
	return json.Marshal(struct {
		plain
		IdleTimeout  string `json:"idle_timeout,omitempty"`
		MaxLifetime  string `json:"max_lifetime,omitempty"`
		TurnWatchdog string `json:"turn_watchdog,omitempty"`
	}{plain(l), FormatDuration(l.IdleTimeout), FormatDuration(l.MaxLifetime), FormatDuration(l.TurnWatchdog)})
}

// MarshalJSON implements json.Marshaler: the idle timeout as a string.
func (t TerminalCLI) MarshalJSON() ([]byte, error) {
	type plain TerminalCLI
	return json.Marshal(struct {
		plain
		IdleTimeout string `json:"idle_timeout,omitempty"`
	}{plain(t), FormatDuration(t.IdleTimeout)})
}

// FormatDuration writes d as time.ParseDuration reads it, without zero
// units at its end ("24h", "1h30m", "5m", "1.5s"); "" for 0.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// UnmarshalJSON implements json.Unmarshaler; unknown fields are errors.
func (l *Limits) UnmarshalJSON(b []byte) error {
	type plain Limits
	var v struct {
		plain
		IdleTimeout  wireDuration `json:"idle_timeout,omitempty"`
		MaxLifetime  wireDuration `json:"max_lifetime,omitempty"`
		TurnWatchdog wireDuration `json:"turn_watchdog,omitempty"`
	}
	v.IdleTimeout.name, v.MaxLifetime.name, v.TurnWatchdog.name = "idle_timeout", "max_lifetime", "turn_watchdog"
	if err := strictUnmarshal(b, &v); err != nil {
		return err
	}
	*l = Limits(v.plain)
	l.IdleTimeout, l.MaxLifetime, l.TurnWatchdog = v.IdleTimeout.d, v.MaxLifetime.d, v.TurnWatchdog.d
	return nil
}

// UnmarshalJSON implements json.Unmarshaler; unknown fields are errors.
func (t *TerminalCLI) UnmarshalJSON(b []byte) error {
	type plain TerminalCLI
	var v struct {
		plain
		IdleTimeout wireDuration `json:"idle_timeout,omitempty"`
	}
	v.IdleTimeout.name = "idle_timeout"
	if err := strictUnmarshal(b, &v); err != nil {
		return err
	}
	*t = TerminalCLI(v.plain)
	t.IdleTimeout = v.IdleTimeout.d
	return nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// wireDuration reads integer nanoseconds or a duration string.
type wireDuration struct {
	name string // the field, for errors
	d    time.Duration
}

func (w *wireDuration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s %q is not a duration: write it like \"90s\", \"5m\" or \"1h30m\", or as integer nanoseconds", w.name, s)
		}
		w.d = d
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("%s: got %s; want a duration like \"5m\" or integer nanoseconds", w.name, b)
	}
	w.d = time.Duration(n)
	return nil
}

// MCPServer is an MCP server a session's agent gets (CreateRequest's
// mcp_servers), next to the server's and its repositories' own: a stdio
// one (Command, Env, Dir: run in the box) or a remote one (URL and
// Headers: streamable HTTP, reached from the host). A header's value is
// never a credential itself: it is exactly ${secret:NAME}, a Harvest
// secret of the session's repository or owner, added on the host when the
// agent starts.
type MCPServer struct {
	// Name: [a-z][a-z0-9_-]*, its tools are offered as mcp__NAME__TOOL.
	Name    string            `json:"name"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Dir is the stdio server's working directory in the box (default:
	// the first workspace).
	Dir string `json:"dir,omitempty"`
	// URL is a remote server's, dialed from the host at public addresses
	// only: one that is, or resolves to, a loopback, private, link-local
	// or reserved address is a 400 unless the operator allows it
	// (harvest serve --mcp-allow).
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}
