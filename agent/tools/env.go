package tools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// Limits bound what tools do and how much they say. Zero fields take the
// defaults below; the package doc explains each cap.
type Limits struct {
	// MaxOutputBytes caps the output of bash, bash_output, glob, grep and the
	// git tools.
	MaxOutputBytes int
	// ReadLines is how many lines read returns when the model gives no limit;
	// ReadMaxBytes caps its output; ReadLineBytes clips each line;
	// ReadScanBytes is how far into a file read scans to find an offset.
	ReadLines     int
	ReadMaxBytes  int
	ReadLineBytes int
	ReadScanBytes int64
	// MaxFileBytes bounds the files edit rewrites and the content write takes.
	MaxFileBytes int64
	// BashTimeout is a command's default time limit, BashMaxTimeout the most
	// the model may ask for.
	BashTimeout    time.Duration
	BashMaxTimeout time.Duration
	// BashTransferBytes caps the output carried out of the box per stream of
	// one command; the box drops the rest (a flood costs no host CPU).
	BashTransferBytes int64
	// MaxBackground caps background processes running at once;
	// BackgroundBufferBytes caps each one's unread output (oldest dropped).
	MaxBackground         int
	BackgroundBufferBytes int
	// GlobResults caps glob's paths; GrepResults caps grep's lines or files.
	GlobResults int
	GrepResults int
	// GitLogMax caps git_log's n.
	GitLogMax int
	// TodoItems caps the todo list.
	TodoItems int
}

// Defaults for Limits.
const (
	DefaultMaxOutputBytes        = 30_000
	DefaultReadLines             = 2000
	DefaultReadMaxBytes          = 64 << 10
	DefaultReadLineBytes         = 2000
	DefaultReadScanBytes         = 64 << 20
	DefaultMaxFileBytes          = 10 << 20
	DefaultBashTimeout           = 2 * time.Minute
	DefaultBashMaxTimeout        = 10 * time.Minute
	DefaultBashTransferBytes     = 64 << 20
	DefaultMaxBackground         = 8
	DefaultBackgroundBufferBytes = 1 << 20
	DefaultGlobResults           = 200
	DefaultGrepResults           = 200
	DefaultGitLogMax             = 200
	DefaultTodoItems             = 100
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxOutputBytes, DefaultMaxOutputBytes)
	def(&l.ReadLines, DefaultReadLines)
	def(&l.ReadMaxBytes, DefaultReadMaxBytes)
	def(&l.ReadLineBytes, DefaultReadLineBytes)
	def(&l.MaxBackground, DefaultMaxBackground)
	def(&l.BackgroundBufferBytes, DefaultBackgroundBufferBytes)
	def(&l.GlobResults, DefaultGlobResults)
	def(&l.GrepResults, DefaultGrepResults)
	def(&l.GitLogMax, DefaultGitLogMax)
	def(&l.TodoItems, DefaultTodoItems)
	if l.ReadScanBytes <= 0 {
		l.ReadScanBytes = DefaultReadScanBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.BashTransferBytes <= 0 {
		l.BashTransferBytes = DefaultBashTransferBytes
	}
	if l.BashTimeout <= 0 {
		l.BashTimeout = DefaultBashTimeout
	}
	if l.BashMaxTimeout <= 0 {
		l.BashMaxTimeout = DefaultBashMaxTimeout
	}
	if l.BashTimeout > l.BashMaxTimeout {
		l.BashTimeout = l.BashMaxTimeout
	}
	return l
}

// Config configures an Env.
type Config struct {
	// Root is the workspace root in the box (default sandbox.WorkspaceRoot,
	// "/workspace"): file tools stay below it unless the Policy allows more.
	Root string
	// Workdir is where relative paths and commands start (default: the box's
	// workdir). It must be inside Root or an allowed path.
	Workdir string
	Policy  Policy
	Limits  Limits
	// Shell runs bash commands: the shell and its flags, the command is
	// appended. Default: /bin/bash -c when the box has bash, else /bin/sh -c.
	// Not a login shell: /etc/profile would reset the PATH the box was given.
	Shell []string
	// Logger receives internal errors (a panicking tool). Default: none.
	Logger *slog.Logger
	// CommandEnv is added to the environment of every command the bash
	// tool runs, in the foreground or the background (KEY=VALUE): for
	// example the egress proxy's HTTP(S)_PROXY.
	CommandEnv []string
}

// Env is what tools act on: one session's sandbox, its workspace and policy,
// and the state that lives across tool calls (the todo list, background
// processes, which files the model has read). It is safe for concurrent use
// by tools running in parallel. Close it when the session ends.
type Env struct {
	sb      *sandbox.Sandbox
	root    string
	roots   []string // root and the allowed paths, cleaned
	workdir string
	limits  Limits
	log     *slog.Logger
	bg      *background
	cmdEnv  []string // commandEnv and Config.CommandEnv

	mu       sync.Mutex
	policy   Policy
	shell    []string
	todos    []TodoItem
	seen     map[string]stamp // files read or written, by resolved path
	allowed  []string         // resolved allowed roots, once known
	resolved bool
}

// stamp identifies a version of a file: what the model last saw.
type stamp struct {
	size    int64
	modTime time.Time
}

// NewEnv returns an Env acting in sb.
func NewEnv(sb *sandbox.Sandbox, cfg Config) (*Env, error) {
	if sb == nil {
		return nil, errors.New("tools: no sandbox")
	}
	root := cfg.Root
	if root == "" {
		root = sandbox.WorkspaceRoot
	}
	if !path.IsAbs(root) {
		return nil, fmt.Errorf("tools: workspace root %q is not an absolute path", root)
	}
	root = path.Clean(root)
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	wd := cfg.Workdir
	if wd == "" {
		wd = sb.Workdir()
	}
	if wd == "" {
		wd = root
	}
	if !path.IsAbs(wd) {
		wd = path.Join(root, wd)
	}
	wd = path.Clean(wd)
	e := &Env{
		sb: sb, root: root, workdir: wd, limits: cfg.Limits.WithDefaults(),
		log: cfg.Logger, policy: cfg.Policy.clone(), shell: slices.Clone(cfg.Shell),
		cmdEnv: append(slices.Clone(commandEnv), cfg.CommandEnv...),
		seen:   map[string]stamp{},
	}
	e.roots = []string{root}
	for _, a := range cfg.Policy.AllowPaths {
		e.roots = append(e.roots, path.Clean(a))
	}
	if !e.policy.AllowExternal && !within(wd, e.lexicalRoots()) {
		return nil, fmt.Errorf("tools: workdir %s is outside the workspace root %s and the allowed paths", wd, root)
	}
	e.bg = newBackground(e)
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e, nil
}

// Sandbox is the box the tools act in.
func (e *Env) Sandbox() *sandbox.Sandbox { return e.sb }

// Root is the workspace root in the box.
func (e *Env) Root() string { return e.root }

// Workdir is where relative paths and commands start.
func (e *Env) Workdir() string { return e.workdir }

// Limits are the caps in force.
func (e *Env) Limits() Limits { return e.limits }

// Policy returns a copy of the policy in force.
func (e *Env) Policy() Policy {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.policy.clone()
}

// Mode is the current permission mode.
func (e *Env) Mode() Mode {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.policy.Mode
}

// SetMode switches the permission mode (for example out of plan mode once
// the user accepted the plan). It applies to tool runs that start after it.
// The rest of the policy is fixed when the Env is made.
func (e *Env) SetMode(m Mode) error {
	if err := m.validate(); err != nil {
		return err
	}
	e.mu.Lock()
	e.policy.Mode = m
	e.mu.Unlock()
	return nil
}

// Close kills every background process still running and forgets them; no
// new ones start afterwards. The box itself is left alone.
func (e *Env) Close(ctx context.Context) error { return e.bg.killAll(ctx) }

func (e *Env) logger() *slog.Logger { return e.log }

// abs makes p absolute (relative to the workdir) and clean. It does not
// resolve symlinks; see resolve.
func (e *Env) abs(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(e.workdir, p)
	}
	return path.Clean(p)
}

func (e *Env) remember(p string, fi sandbox.FileInfo) {
	e.mu.Lock()
	e.seen[p] = stamp{size: fi.Size, modTime: fi.ModTime}
	e.mu.Unlock()
}

func (e *Env) lastSeen(p string) (stamp, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.seen[p]
	return s, ok
}
