package proto

import (
	"errors"
	"io/fs"
	"net"
	"syscall"
	"time"
)

// Methods.
const (
	MethodHello    = "hello"
	MethodExec     = "exec"
	MethodAttach   = "attach"
	MethodSignal   = "signal"
	MethodKill     = "kill"
	MethodResize   = "resize"
	MethodPs       = "ps"
	MethodRead     = "read"
	MethodWrite    = "write"
	MethodStat     = "stat"
	MethodList     = "list"
	MethodRemove   = "remove"
	MethodMkdir    = "mkdir"
	MethodRename   = "rename"
	MethodGlob     = "glob"
	MethodGrep     = "grep"
	MethodInfo     = "info"
	MethodShutdown = "shutdown"

	// Forwarding: see "Box listeners" in the package doc.
	MethodListen      = "listen"
	MethodAccept      = "accept"
	MethodListenClose = "listen_close"
	MethodConnClose   = "conn_close"
	// MethodDial connects from inside the box: see "Box dials" in the
	// package doc.
	MethodDial = "dial"
	// MethodFence arms, extends or disarms the box's fence: see package
	// agentd's "Fence".
	MethodFence = "fence"
)

// File descriptors named in Data, EOF and Window frames.
const (
	FdStdin  byte = 0
	FdStdout byte = 1
	FdStderr byte = 2
)

// Error codes. The host maps them back onto Go errors (fs.ErrNotExist, ...).
const (
	CodeNotFound   = "not_found"
	CodeExists     = "exists"
	CodePermission = "permission"
	CodeInvalid    = "invalid"
	CodeIsDir      = "is_dir"
	CodeNotDir     = "not_dir"
	CodeNotEmpty   = "not_empty"
	CodeTooLarge   = "too_large"
	CodeNoProcess  = "no_process"
	CodeResource   = "resource" // out of pids, memory, fds: the box is at a limit
	CodeClosed     = "closed"   // the listener (or the accept) was closed
	CodeRefused    = "refused"  // dial: nothing listens at that address in the box
	CodeTimeout    = "timeout"  // dial: the connection was not established in time
	CodeInternal   = "internal"
)

// Error is a failed call.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Is lets errors.Is(err, fs.ErrNotExist) and friends work on the host side.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeNotFound:
		return target == fs.ErrNotExist
	case CodeExists:
		return target == fs.ErrExist
	case CodePermission:
		return target == fs.ErrPermission
	case CodeInvalid:
		return target == fs.ErrInvalid
	case CodeClosed:
		return target == net.ErrClosed
	case CodeRefused:
		return target == syscall.ECONNREFUSED
	case CodeTimeout:
		return target == syscall.ETIMEDOUT
	}
	return false
}

// ErrNoProcess is what a signal or attach to an unknown process gives.
var ErrNoProcess = errors.New("no such process in the box")

// Hello is the first call on every connection.
type Hello struct {
	Version int    `json:"version"`
	BoxID   string `json:"box_id"`
	// Claim gives a warm agent (started before its box was asked for) the
	// box's identity. It is accepted once; later hellos must name that box.
	Claim *Claim `json:"claim,omitempty"`
}

// Claim is a box's identity, for an agent started warm.
type Claim struct {
	BoxID      string   `json:"box_id"`
	Env        []string `json:"env"`
	Workdir    string   `json:"workdir"`
	DeadlineMS int64    `json:"deadline_ms,omitempty"` // unix ms; 0: none
	// Pids is the box's pids limit for its commands (Spec.Limits.Pids). An
	// agent started with --nproc gives each command it as RLIMIT_NPROC (plus
	// what its own idle threads take), so a fork bomb leaves the agent the
	// pids reserve to create threads in. 0: no cap.
	Pids int `json:"pids,omitempty"`
}

// HelloReply describes the agent.
type HelloReply struct {
	Version  int       `json:"version"`
	BoxID    string    `json:"box_id"`
	PID      int       `json:"pid"` // the agent's pid as the box sees it (1 in a real box)
	UID      int       `json:"uid"`
	GID      int       `json:"gid"`
	Workdir  string    `json:"workdir"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// TTY asks for a pseudo-terminal.
type TTY struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExecParams starts a process. Stdout and Stderr stream on Stream; with a TTY
// both are the terminal and arrive as fd 1.
type ExecParams struct {
	Stream uint32   `json:"stream"`
	Args   []string `json:"args"`
	// Env entries override the box environment by key.
	Env   []string `json:"env,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Stdin bool     `json:"stdin,omitempty"` // false: stdin is /dev/null
	TTY   *TTY     `json:"tty,omitempty"`
	// OutputLimit caps bytes delivered per output fd; the rest is read and
	// dropped (counted in ExitStatus.Dropped) so the process never blocks on it.
	OutputLimit int64 `json:"output_limit,omitempty"`
	// TimeoutMS kills the process tree after this long, even with no host.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Window is the initial output credit per fd (DefaultWindow when 0).
	Window uint32 `json:"window,omitempty"`
}

// ExecReply identifies the started process.
type ExecReply struct {
	Proc        uint64 `json:"proc"`
	PID         int    `json:"pid"`
	StdinWindow uint32 `json:"stdin_window,omitempty"`
}

// AttachParams attaches a new stream to a running or exited process (after a
// reconnect). Output produced while nobody was attached is kept in a bounded
// ring; what did not fit is counted in ExitStatus.Dropped.
type AttachParams struct {
	Proc   uint64 `json:"proc"`
	Stream uint32 `json:"stream"`
	Window uint32 `json:"window,omitempty"`
}

// SignalParams sends a signal to a process's process group (or the process
// alone with Group false).
type SignalParams struct {
	Proc   uint64 `json:"proc"`
	Signal int    `json:"signal"`
	Group  bool   `json:"group,omitempty"`
}

// KillParams kills a process and every descendant it has.
type KillParams struct {
	Proc uint64 `json:"proc"`
}

// ResizeParams resizes a process's terminal.
type ResizeParams struct {
	Proc uint64 `json:"proc"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code      int  `json:"code"`             // exit code, or -1 when killed by a signal
	Signal    int  `json:"signal,omitempty"` // the signal that killed it
	OOMKilled bool `json:"oom_killed,omitempty"`
	TimedOut  bool `json:"timed_out,omitempty"`
	// BoxTimedOut: the box's time limit (its deadline) killed it.
	BoxTimedOut bool  `json:"box_timed_out,omitempty"`
	Dropped     int64 `json:"dropped,omitempty"` // output bytes read but not delivered
	// DurationMS is wall time from start to exit.
	DurationMS int64 `json:"duration_ms"`
	// Error ends a forwarded connection that failed (reset, broken pipe);
	// empty when both directions ended with EOF.
	Error string `json:"error,omitempty"`
}

// ProcInfo describes one process the agent started.
type ProcInfo struct {
	Proc    uint64      `json:"proc"`
	PID     int         `json:"pid"`
	Args    []string    `json:"args"`
	Started time.Time   `json:"started"`
	Exit    *ExitStatus `json:"exit,omitempty"` // nil while running
}

// PsReply lists processes the agent started and still remembers.
type PsReply struct {
	Procs []ProcInfo `json:"procs"`
}

// ReadParams reads up to Length bytes (at most ChunkSize) at Offset.
type ReadParams struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Length int64  `json:"length"`
}

// ReadReply accompanies the bytes read (in the blob).
type ReadReply struct {
	Size int64 `json:"size"` // the file's size
	EOF  bool  `json:"eof"`
}

// WriteParams writes the blob at Offset (or appends).
type WriteParams struct {
	Path     string `json:"path"`
	Offset   int64  `json:"offset,omitempty"`
	Truncate bool   `json:"truncate,omitempty"` // truncate to Offset+len(blob) first
	Append   bool   `json:"append,omitempty"`
	Create   bool   `json:"create,omitempty"`
	MkdirAll bool   `json:"mkdir_all,omitempty"` // create missing parents
	Mode     uint32 `json:"mode,omitempty"`      // for new files; default 0644
}

// WriteReply says how much was written.
type WriteReply struct {
	Written int64 `json:"written"`
}

// PathParams names one path.
type PathParams struct {
	Path     string `json:"path"`
	NoFollow bool   `json:"no_follow,omitempty"` // stat: lstat
}

// FileInfo describes a file in the box.
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // fs.FileMode bits
	ModTime time.Time `json:"mod_time"`
	Link    string    `json:"link,omitempty"` // symlink target (stat with NoFollow, list)
}

// ListParams lists a directory.
type ListParams struct {
	Path  string `json:"path"`
	Limit int    `json:"limit,omitempty"`
}

// ListReply holds the entries, sorted by name.
type ListReply struct {
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

// RemoveParams removes a path (recursively with Recursive).
type RemoveParams struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// MkdirParams makes a directory.
type MkdirParams struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
}

// RenameParams renames a path.
type RenameParams struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// GlobParams matches a doublestar pattern ("**/*.go") under Root.
type GlobParams struct {
	Root      string `json:"root"`
	Pattern   string `json:"pattern"`
	GitIgnore bool   `json:"gitignore,omitempty"` // skip what .gitignore files exclude, and .git
	Limit     int    `json:"limit,omitempty"`
}

// GlobReply lists matching paths (absolute), sorted.
type GlobReply struct {
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated,omitempty"`
}

// GrepParams searches file contents with a Go regular expression.
type GrepParams struct {
	Root       string `json:"root"`
	Pattern    string `json:"pattern"`
	Include    string `json:"include,omitempty"` // doublestar filter on paths relative to Root
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	Literal    bool   `json:"literal,omitempty"`
	GitIgnore  bool   `json:"gitignore,omitempty"`
	MaxResults int    `json:"max_results,omitempty"`
	// MaxFileSize skips larger files (default 4 MiB). Binary files are skipped.
	MaxFileSize int64 `json:"max_file_size,omitempty"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepReply holds matches in path, then line order.
type GrepReply struct {
	Matches      []GrepMatch `json:"matches"`
	FilesScanned int         `json:"files_scanned"`
	Truncated    bool        `json:"truncated,omitempty"`
}

// InfoParams: with Collect the agent first collects garbage and returns the
// freed memory to the kernel, so RSSBytes measures what it holds now rather
// than the peak its runtime kept mapped (a Go heap gives pages back lazily).
type InfoParams struct {
	Collect bool `json:"collect,omitempty"`
}

// InfoReply reports the agent's own health.
type InfoReply struct {
	RSSBytes int64 `json:"rss_bytes"`
	Threads  int   `json:"threads"`
	Procs    int   `json:"procs"`     // processes the agent started that still run
	BoxProcs int   `json:"box_procs"` // every process the agent can see in /proc (the whole box when it is PID 1)
	Conns    int   `json:"conns"`
	UptimeMS int64 `json:"uptime_ms"`
	// Listeners and Forwards count open box listeners and forwarded
	// connections, over every host connection.
	Listeners int `json:"listeners,omitempty"`
	Forwards  int `json:"forwards,omitempty"`
}

// ShutdownParams asks the agent to end the box: SIGTERM everything, wait up to
// GraceMS, SIGKILL the rest, exit.
type ShutdownParams struct {
	GraceMS int64 `json:"grace_ms"`
}

// FenceParams arms the box's fence (its dead-man's switch): the agent
// ends the box at the host's deadline unless a later fence call moves it
// on. The deadline is given on the host's monotonic clock, as SentNS (the
// host's clock when it sent the call: any origin, the same on one
// connection) plus LeftNS: the agent maps it onto its own clock with the
// smallest offset it has seen on the connection, so a call that arrives
// late (the host paused between making and sending it) does not move the
// deadline past what the host meant. The deadline only moves later; Off
// disarms the fence. Only the host may call it (see package agentd).
type FenceParams struct {
	SentNS int64 `json:"sent_ns"`
	LeftNS int64 `json:"left_ns"`
	Off    bool  `json:"off,omitempty"`
}

// FenceReply says how long the box has left by the agent's clock (-1:
// the fence is off).
type FenceReply struct {
	LeftMS int64 `json:"left_ms"`
}

// ListenParams opens a listener inside the box, in its network namespace:
// Network "tcp" with Addr "IP:PORT" (an IP literal or empty, port 0 for any),
// or "unix" with Addr an absolute socket path in the box.
type ListenParams struct {
	Network string `json:"network"`
	Addr    string `json:"addr"`
}

// ListenReply names the listener. It belongs to the connection that opened
// it and is closed when that connection ends.
type ListenReply struct {
	Listener uint64 `json:"listener"`
	Addr     string `json:"addr"` // the address actually bound ("127.0.0.1:41234")
}

// AcceptParams waits for the next connection on a listener and binds it to
// Stream, which the host registered before the call. The reply comes when a
// box process connects (or the listener, the accept or the connection ends:
// an error with CodeClosed). From then on the stream carries the connection:
// box → host bytes as Data on fd 1 within the Window credit the host grants
// (EOF on fd 1 when the box side shut its writing half), host → box bytes as
// Data on fd 0 within InWindow and the Window frames the agent returns on fd
// 0 (EOF on fd 0 half-closes the box socket), and an Exit frame once both
// directions are done.
type AcceptParams struct {
	Listener uint64 `json:"listener"`
	Stream   uint32 `json:"stream"`
	Window   uint32 `json:"window,omitempty"` // initial box → host credit (DefaultWindow when 0)
}

// AcceptReply describes the accepted connection, with addresses as the box
// sees them.
type AcceptReply struct {
	Local    string `json:"local"`
	Remote   string `json:"remote"`
	InWindow uint32 `json:"in_window"` // initial host → box credit
}

// ListenCloseParams closes a listener: pending accepts fail with CodeClosed.
// Connections it accepted stay open. Closing an unknown listener succeeds.
type ListenCloseParams struct {
	Listener uint64 `json:"listener"`
}

// ConnCloseParams ends the forwarded connection on Stream, or cancels the
// accept waiting to bind it. Without Abort it is what closing a socket is:
// the host sends and reads nothing more; the agent still writes what it
// queued (for a bounded time), then closes the box socket. With Abort the box
// socket is closed at once. No Exit frame follows either: the host has
// forgotten the stream. An unknown stream is not an error.
type ConnCloseParams struct {
	Stream uint32 `json:"stream"`
	Abort  bool   `json:"abort,omitempty"`
}

// DialParams connects to Addr from inside the box and binds the connection
// to Stream, which the host registered before the call: Network "tcp" with
// Addr a loopback "IP:PORT" (127.0.0.0/8 or ::1; the agent resolves no
// names and dials nothing else, whatever the box's network), or "unix"
// with Addr an absolute socket path in the box. The reply comes once the
// connection is established; from then on the stream carries it exactly
// as an accepted connection's (see AcceptParams): box → host bytes as Data
// on fd 1 within Window, host → box bytes on fd 0 within the reply's
// InWindow, EOF frames for half-closes, one Exit when both directions are
// done. conn_close with Abort on Stream cancels a dial still in progress.
type DialParams struct {
	Network string `json:"network"`
	Addr    string `json:"addr"`
	Stream  uint32 `json:"stream"`
	Window  uint32 `json:"window,omitempty"` // initial box → host credit (DefaultWindow when 0)
	// TimeoutMS bounds the connect in the box (the agent's own bound when
	// 0 or larger).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// DialReply describes the dialed connection, with addresses as the box
// sees them: Local is the agent's end, Remote the address dialed.
type DialReply = AcceptReply
