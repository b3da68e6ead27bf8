package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Exit codes of `harvest sandbox run` besides the command's own (like docker run).
const (
	exitHarvestError = 125 // Harvest could not create the box or run the command
	exitNotExec      = 126 // the command exists but could not be executed
	exitNotFound     = 127 // the command was not found in the box
)

const unsafeWarning = "WARNING: the host backend runs commands directly on this machine with NO isolation"

func newSandboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create boxes and run commands in them",
		Long: `Create boxes and run commands in them, and manage the boxes on this machine.

A box outlives the process that made it only on purpose: harvest serve
leaves its sessions' boxes running when it stops, for its next start to
reattach (unless --stop-boxes-on-exit), and harvest sandbox run --keep keeps
its box. harvest sandbox ls lists every box; harvest sandbox prune destroys
those no running Harvest owns, and never a running one's; harvest sandbox
rm destroys the boxes you name.`,
	}
	cmd.AddCommand(newSandboxRunCmd(), newSandboxLsCmd(), newSandboxRmCmd(), newSandboxPruneCmd())
	return cmd
}

type runFlags struct {
	backend    string
	workspaces []string
	memory     string
	disk       diskFlags
	pids       int
	cpus       float64
	network    string
	timeout    time.Duration
	env        []string
	user       string
	workdir    string
	image      string
	runtime    string
	tty        string
	unsafeHost bool
	keep       bool
}

func newSandboxRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a command in a fresh box, then destroy the box",
		Long: `Create a box, run CMD in it with stdin, stdout and stderr attached, exit with
its status, and destroy the box.

Workspaces are host directories mounted read-write at /workspace/NAME; the
command starts in the first one. The box has no network, no host
environment and no host credentials; it runs as an unprivileged user
(by default the owner of the first workspace, or 1000:1000).

Exit status: the command's own, 128+N if signal N killed it, 125 if Harvest
failed, 126 if the command could not be executed, 127 if it was not found.`,
		Example: `  harvest sandbox run -- sh -c 'id; ls /'
  harvest sandbox run --workspace ./myrepo --memory 2g -- make test
  harvest sandbox run --backend docker --image harvest/kitchen-sink --workspace src=. -- cargo build
  echo hello | harvest sandbox run -- tr a-z A-Z`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("no command: give it after --, like: harvest sandbox run -- ls /")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runInBox(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.backend, "backend", backends.Default, "sandbox backend: "+strings.Join(backends.Names(), ", "))
	fl.StringArrayVarP(&f.workspaces, "workspace", "w", nil, "host directory to mount at /workspace/NAME, as DIR or NAME=DIR (repeatable)")
	fl.StringVar(&f.memory, "memory", "", "memory limit, like 512m or 6g (default 6g)")
	fl.StringVar(&f.disk.size, "disk", "", "put the box's /tmp and HOME on a disk of this size, like 1g, removed with the box (--workspace directories are yours, used in place: not on it) (default: none, /tmp and HOME in memory)")
	fl.StringVar(&f.disk.inodes, "disk-inodes", "", "most files on the --disk (default: one per 16 KiB)")
	fl.IntVar(&f.pids, "pids", 0, fmt.Sprintf("process and thread limit (default %d)", sandbox.DefaultPids))
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores, like 1.5 (default: none)")
	fl.StringVar(&f.network, "network", "none", "network: none (the only mode for now)")
	fl.DurationVar(&f.timeout, "timeout", 0, "time limit of the box, like 10m (default 24h)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "environment variable KEY=VALUE for the box (repeatable; nothing is inherited)")
	fl.StringVarP(&f.user, "user", "u", "", "box user as UID[:GID] (default: owner of the first workspace, or 1000:1000)")
	fl.StringVar(&f.workdir, "workdir", "", "working directory inside the box (default: the first workspace)")
	fl.StringVar(&f.image, "image", "", "container image (docker backend)")
	fl.StringVar(&f.runtime, "runtime", "", runtimeHelp)
	fl.StringVar(&f.tty, "tty", "auto", "pseudo-terminal: auto (when stdin is a terminal), always or never")
	fl.BoolVar(&f.unsafeHost, "unsafe-host", false, "allow --backend host: run directly on this machine with NO isolation")
	fl.BoolVar(&f.keep, "keep", false, "keep the box after the command ends (remove it with harvest sandbox rm ID, or harvest sandbox prune: no running Harvest owns it)")
	return cmd
}

// specFromFlags builds and checks the spec, returning one error that says what
// to change.
func specFromFlags(f runFlags) (sandbox.Spec, error) {
	var spec sandbox.Spec
	for _, w := range f.workspaces {
		name, dir, ok := strings.Cut(w, "=")
		if !ok {
			dir, name = w, ""
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return spec, fmt.Errorf("--workspace %s: %w", w, err)
		}
		if name == "" {
			name = filepath.Base(abs)
			if name == "/" || name == "." {
				return spec, fmt.Errorf("--workspace %s: give it a name, like --workspace NAME=%s", w, dir)
			}
		}
		spec.Workspaces = append(spec.Workspaces, sandbox.Workspace{Name: name, HostPath: abs})
	}
	if f.memory != "" {
		n, err := sandbox.ParseSize(f.memory)
		if err != nil {
			return spec, fmt.Errorf("--memory: %w", err)
		}
		spec.Limits.MemoryBytes = n
	}
	if f.pids < 0 {
		return spec, fmt.Errorf("--pids %d: must be positive", f.pids)
	}
	spec.Limits.Pids = f.pids
	spec.Limits.CPUs = f.cpus
	spec.Network = sandbox.Network(f.network)
	if f.timeout < 0 {
		return spec, fmt.Errorf("--timeout %s: must be positive", f.timeout)
	}
	spec.Timeout = f.timeout
	spec.Workdir = f.workdir
	spec.Image = f.image
	if len(f.env) > 0 {
		spec.Env = map[string]string{}
		for _, kv := range f.env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return spec, fmt.Errorf("--env %s: use KEY=VALUE (host variables are never passed implicitly)", kv)
			}
			spec.Env[k] = v
		}
	}
	u, err := parseUser(f.user, spec.Workspaces)
	if err != nil {
		return spec, err
	}
	spec.User = u
	switch f.tty {
	case "auto", "always", "never":
	default:
		return spec, fmt.Errorf("--tty %q: use auto, always or never", f.tty)
	}
	return spec, nil
}

// parseUser reads UID[:GID]; the default is the owner of the first workspace
// when that is not root, else 1000:1000.
func parseUser(s string, ws []sandbox.Workspace) (sandbox.User, error) {
	if s == "" {
		if len(ws) > 0 {
			if fi, err := os.Stat(ws[0].HostPath); err == nil {
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid != 0 && st.Gid != 0 {
					return sandbox.User{UID: int(st.Uid), GID: int(st.Gid)}, nil
				}
			}
		}
		return sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}, nil
	}
	us, gs, hasGID := strings.Cut(s, ":")
	uid, err := strconv.Atoi(us)
	if err != nil {
		return sandbox.User{}, fmt.Errorf("--user %q: use numeric UID[:GID], like 1000:1000", s)
	}
	gid := uid
	if hasGID {
		if gid, err = strconv.Atoi(gs); err != nil {
			return sandbox.User{}, fmt.Errorf("--user %q: use numeric UID[:GID], like 1000:1000", s)
		}
	}
	if uid <= 0 || gid <= 0 {
		return sandbox.User{}, fmt.Errorf("--user %s: the box user must not be root (uid and gid > 0; the default is %d:%d)", s, sandbox.DefaultUID, sandbox.DefaultGID)
	}
	return sandbox.User{UID: uid, GID: gid}, nil
}

const runtimeHelp = `the docker backend's OCI runtime: "runsc" runs boxes under gVisor, a user-space kernel (see harvest doctor; default dockerd's, runc)`

// checkRuntimeFlag: --runtime configures the docker backend only.
func checkRuntimeFlag(backend, runtime string) error {
	if err := checkRuntimeName(runtime); err != nil {
		return err
	}
	if runtime != "" && backend != docker.Name {
		return fmt.Errorf("--runtime %s is for --backend docker, not %s: add --backend docker (gVisor runs docker's boxes)", runtime, backend)
	}
	return nil
}

var runtimeName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// checkRuntimeName checks --runtime is a name dockerd could know.
func checkRuntimeName(runtime string) error {
	if runtime != "" && !runtimeName.MatchString(runtime) {
		return fmt.Errorf("--runtime %q: give the name of an OCI runtime registered with dockerd, like runsc", runtime)
	}
	return nil
}

// openBackend opens a backend, warning on stderr when it is the unsafe host
// backend; the returned func releases it.
func openBackend(name string, o backends.Options, stderr io.Writer) (sandbox.Provider, func(), error) {
	p, err := backends.Open(name, o)
	if err != nil {
		return nil, nil, err
	}
	if name == "host" {
		fmt.Fprintln(stderr, "harvest:", unsafeWarning)
	}
	closeP := func() {}
	if c, ok := p.(interface{ Close() error }); ok {
		closeP = func() { c.Close() }
	}
	return p, closeP, nil
}

func runInBox(cmd *cobra.Command, f runFlags, args []string) error {
	stderr := cmd.ErrOrStderr()
	if err := checkRuntimeFlag(f.backend, f.runtime); err != nil {
		return exitCode(2, err)
	}
	spec, err := specFromFlags(f)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	diskSize, err := f.disk.limits()
	if err != nil {
		return exitCode(2, err)
	}
	p, closeP, err := openBackend(f.backend, backends.Options{AllowUnsafeHost: f.unsafeHost, DockerRuntime: f.runtime}, stderr)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer closeP()
	removeDisk := func() {}
	if diskSize != (disk.Size{}) {
		if spec.DiskDir, removeDisk, err = boxDisk(cmd.Context(), diskSize); err != nil {
			return exitCode(exitHarvestError, err)
		}
	}

	// First signal: forwarded to the command (pipes) or ignored (the terminal
	// delivers ^C itself); SIGTERM/SIGHUP or a second SIGINT: kill and clean up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	startCtx, cancelStart := context.WithTimeout(ctx, 2*time.Minute)
	sb, err := startWithSignals(startCtx, p, spec, sigs)
	cancelStart()
	if err != nil {
		removeDisk()
		return exitCode(exitHarvestError, err)
	}
	cleanup := func() {
		if f.keep {
			if spec.DiskDir != "" {
				fmt.Fprintf(stderr, "harvest: its disk stays mounted at %s\n", spec.DiskDir)
			}
			fmt.Fprintf(stderr, "harvest: box %s kept (%s backend); remove it with: harvest sandbox rm %s\n", sb.ID(), sb.Backend(), sb.ID())
			sb.Close()
			return
		}
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if err := sb.Destroy(dctx); err != nil {
			fmt.Fprintf(stderr, "harvest: destroying box %s: %v\n", sb.ID(), err)
			return
		}
		removeDisk()
	}
	defer cleanup()

	stdinFD := int(os.Stdin.Fd())
	useTTY := f.tty == "always" || (f.tty == "auto" && term.IsTerminal(stdinFD))
	c := &sandbox.Cmd{Args: args, Stdin: cmd.InOrStdin(), Stdout: cmd.OutOrStdout(), Stderr: stderr}
	var restore func()
	if useTTY {
		rows, cols := 24, 80
		if w, h, err := term.GetSize(stdinFD); err == nil {
			cols, rows = w, h
		}
		c.TTY = &sandbox.TTYSize{Rows: uint16(rows), Cols: uint16(cols)}
		if term.IsTerminal(stdinFD) {
			if old, err := term.MakeRaw(stdinFD); err == nil {
				restore = func() { term.Restore(stdinFD, old) }
			}
		}
	}
	if restore != nil {
		defer restore()
	}
	proc, err := sb.Start(ctx, c)
	if err != nil {
		var pe *proto.Error
		if errors.As(err, &pe) && pe.Code == proto.CodeNotFound {
			return exitCode(exitNotFound, err)
		}
		if errors.As(err, &pe) && pe.Code == proto.CodePermission {
			return exitCode(exitNotExec, err)
		}
		return exitCode(exitHarvestError, err)
	}
	winch := make(chan os.Signal, 1)
	if useTTY {
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
	}
	interrupts := 0
	for {
		select {
		case <-proc.Done():
			st, err := proc.Wait(ctx)
			if restore != nil {
				restore()
				restore = nil
			}
			if err != nil {
				if errors.Is(err, sandbox.ErrClosed) && boxExpired(sb.Handle(), time.Now()) {
					// The box ended at its time limit before its agent
					// sent the command's status.
					err = fmt.Errorf("the box's time limit (%s; set it with --timeout) was reached: the box ended with the command", boxLimit(sb.Handle()))
				}
				return exitCode(exitHarvestError, err)
			}
			switch {
			case st.BoxTimedOut:
				fmt.Fprintf(stderr, "harvest: the command ended: %v: the box lives %s; give it longer with --timeout\n", st, boxLimit(sb.Handle()))
			case st.OOMKilled || st.TimedOut || st.Dropped > 0:
				fmt.Fprintln(stderr, "harvest: the command ended:", st)
			}
			return exitCode(st.ShellCode(), nil)
		case <-winch:
			if w, h, err := term.GetSize(stdinFD); err == nil {
				proc.Resize(ctx, uint16(h), uint16(w))
			}
		case sig := <-sigs:
			interrupts++
			if sig == syscall.SIGINT && interrupts == 1 && !useTTY {
				proc.Signal(ctx, syscall.SIGINT)
				continue
			}
			if sig == syscall.SIGINT && useTTY && interrupts == 1 {
				continue // the terminal already sent ^C to the command
			}
			kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
			proc.Kill(kctx)
			kcancel()
		}
	}
}

// boxLimit is the box's time limit, as --timeout would give it.
func boxLimit(h sandbox.Handle) time.Duration {
	return h.Deadline.Sub(h.Created).Round(time.Second)
}

// boxExpired reports whether the box's time limit has come at now. The
// agent may be handed the deadline in whole seconds (local backend), so
// it can end the box up to a second before h.Deadline.
func boxExpired(h sandbox.Handle, now time.Time) bool {
	return !h.Deadline.IsZero() && !now.Before(h.Deadline.Add(-time.Second))
}

// startWithSignals starts the box, giving up cleanly on SIGINT or SIGTERM.
func startWithSignals(ctx context.Context, p sandbox.Provider, spec sandbox.Spec, sigs <-chan os.Signal) (*sandbox.Sandbox, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		sb  *sandbox.Sandbox
		err error
	}
	ch := make(chan result, 1)
	go func() {
		sb, err := p.Start(ctx, spec)
		ch <- result{sb, err}
	}()
	select {
	case r := <-ch:
		return r.sb, r.err
	case <-sigs:
		cancel()
		r := <-ch
		if r.sb != nil {
			dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
			r.sb.Destroy(dctx)
			dcancel()
		}
		return nil, errors.New("interrupted while creating the box")
	}
}

// listAll lists the boxes of every backend that can list them.
func listAll(ctx context.Context) ([]sandbox.Handle, map[string]sandbox.Provider) {
	var out []sandbox.Handle
	providers := map[string]sandbox.Provider{}
	for _, b := range backends.All {
		p := b.New(backends.Options{AllowUnsafeHost: true})
		providers[b.Name] = p
		l, ok := p.(sandbox.Lister)
		if !ok {
			continue
		}
		hs, err := l.List(ctx)
		if err != nil {
			continue
		}
		out = append(out, hs...)
	}
	return out, providers
}

func newSandboxLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List boxes on this machine (including ones a crashed Harvest left behind)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			hs, providers := listAll(ctx)
			defer closeAll(providers)
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tBACKEND\tSTATUS\tCREATED\tWORKSPACES")
			for _, h := range hs {
				status := "gone"
				rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
				if sb, err := providers[h.Backend].Recover(rctx, h); err == nil {
					status = "running"
					sb.Close()
				}
				rcancel()
				backend := h.Backend
				if h.Unsafe {
					backend += " (UNSAFE)"
				}
				var ws []string
				for _, w := range h.Spec.Workspaces {
					ws = append(ws, w.Name+"="+w.HostPath)
				}
				created := "-"
				if !h.Created.IsZero() {
					created = h.Created.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.ID, backend, status, created, strings.Join(ws, ","))
			}
			return tw.Flush()
		},
	}
}

func newSandboxRmCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "rm ID... | --all",
		Short: "Destroy boxes: kill everything in them and release their resources",
		RunE: func(cmd *cobra.Command, ids []string) error {
			if all == (len(ids) > 0) {
				return exitCode(2, errors.New("give box ids, or --all"))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			hs, providers := listAll(ctx)
			defer closeAll(providers)
			want := map[string]bool{}
			for _, id := range ids {
				want[id] = true
			}
			var failed []string
			for _, h := range hs {
				if !all && !want[h.ID] {
					continue
				}
				delete(want, h.ID)
				if err := providers[h.Backend].Destroy(ctx, h); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", h.ID, err)
					failed = append(failed, h.ID)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), h.ID)
			}
			for id := range want {
				failed = append(failed, id)
				fmt.Fprintf(cmd.ErrOrStderr(), "harvest: no box %s on this machine (see harvest sandbox ls)\n", id)
			}
			if len(failed) > 0 {
				return exitCode(1, nil)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "destroy every box on this machine")
	return cmd
}

func closeAll(ps map[string]sandbox.Provider) {
	for _, p := range ps {
		if c, ok := p.(interface{ Close() error }); ok {
			c.Close()
		}
	}
}
