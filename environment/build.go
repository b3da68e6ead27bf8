package environment

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store"
)

// DefaultSetupTimeout bounds a setup script.
const DefaultSetupTimeout = 30 * time.Minute

// Config is what a Builder needs.
type Config struct {
	// Dir holds the environments: Dir/ID/{workspace/NAME,home,build.log}.
	// Required.
	Dir   string
	Store store.Environments
	// Provider opens a sandbox backend by name. Required.
	Provider func(name string) (sandbox.Provider, error)
	// Egress, when set, lets setup scripts reach the hosts it allows
	// (package registries). Nil: setup runs without network.
	Egress *egress.Proxy
	// Version is Harvest's, part of every fingerprint.
	Version string
	// User owns the environments' files and runs the setup (the box user).
	User sandbox.User
	// SetupTimeout bounds a setup (default DefaultSetupTimeout).
	SetupTimeout time.Duration
	Logger       *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Defaults are the server's scripts per repository (nil: none).
	Defaults *Defaults
}

// Builder builds environments, one at a time per repository and backend.
type Builder struct {
	cfg Config

	mu    sync.Mutex
	locks map[string]*sync.Mutex // repo + backend → its build lock
}

// NewBuilder makes a Builder.
func NewBuilder(cfg Config) (*Builder, error) {
	if cfg.Dir == "" || cfg.Store == nil || cfg.Provider == nil {
		return nil, errors.New("environment: Dir, Store and Provider are required")
	}
	if cfg.SetupTimeout <= 0 {
		cfg.SetupTimeout = DefaultSetupTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.User == (sandbox.User{}) {
		cfg.User = sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}
	}
	if err := os.MkdirAll(cfg.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	return &Builder{cfg: cfg, locks: map[string]*sync.Mutex{}}, nil
}

// Request is an environment to build.
type Request struct {
	// Repo names the repository (Environment.Repo); Name is its workspace
	// name (/workspace/NAME).
	Repo, Name string
	// Ref is the branch it follows (for people and refreshes).
	Ref string
	// Backend is the sandbox backend it is for; Image the docker image.
	Backend, Image string
	// Checkout makes dst (which does not exist) a checkout of the
	// repository at Ref, owned by the box user, and returns its commit
	// ("" when it is not a git repository). It is Harvest's own checkout:
	// Detect reads it before any box has seen it.
	Checkout func(ctx context.Context, dst string) (commit string, err error)
	// Env is given to the setup script (KEY=VALUE: the repository's setup
	// secrets). Never logged.
	Env []string
	// Log receives the setup's output as it runs (nil: only the
	// environment's build.log keeps it).
	Log io.Writer
	// Force builds even when a ready environment has the same
	// fingerprint.
	Force bool
	// User is the user who asks (Environment.User).
	User string
}

// Fingerprint is what decides whether an environment is still good: the
// repository, its commit, its setup and start scripts (or what was
// detected), the backend, the base image and Harvest's version.
func Fingerprint(repo, commit, backend, image, version string, p Plan) string {
	h := sha256.New()
	for _, s := range []string{repo, commit, backend, image, version, p.Hash()} {
		io.WriteString(h, s+"\x00")
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func (b *Builder) lock(key string) func() {
	b.mu.Lock()
	l := b.locks[key]
	if l == nil {
		l = &sync.Mutex{}
		b.locks[key] = l
	}
	b.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Latest is the newest ready environment of repo on backend (nil: none).
func (b *Builder) Latest(ctx context.Context, repo, backend string) (*store.Environment, error) {
	es, err := b.cfg.Store.ListEnvironments(ctx, store.EnvironmentFilter{Repo: repo, Backend: backend, States: []string{store.EnvReady}})
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return es[0], nil
}

// StartScript is the server's start script for repo ("" for none): a
// session runs it when its repository has no .harvest/start.sh.
func (b *Builder) StartScript(repo string) string { return b.cfg.Defaults.For(repo).Start }

// List lists environments, newest first.
func (b *Builder) List(ctx context.Context, f store.EnvironmentFilter) ([]*store.Environment, error) {
	return b.cfg.Store.ListEnvironments(ctx, f)
}

// Get reads an environment.
func (b *Builder) Get(ctx context.Context, id string) (*store.Environment, error) {
	return b.cfg.Store.GetEnvironment(ctx, id)
}

// Home is an environment's HOME layer (sandbox.Spec.HomeLayer).
func (b *Builder) Home(id string) string { return filepath.Join(b.cfg.Dir, id, "home") }

// Artifacts is the tar of what an environment's setup left in its
// checkout beyond the repository's files ("" path exists only when the
// setup ran).
func (b *Builder) Artifacts(id string) string { return filepath.Join(b.cfg.Dir, id, "artifacts.tar") }

// Layer is the tree of what an environment's setup left in its checkout
// (the files Artifacts holds, unpacked by the setup's box), shown under a
// session's checkout as a read-only layer (sandbox.Workspace.Layer) on
// backends that take one. Environments built before it have none: their
// sessions unpack Artifacts.
func (b *Builder) Layer(id string) string { return filepath.Join(b.cfg.Dir, id, "checkout") }

// LogPath is an environment's build log.
func (b *Builder) LogPath(id string) string { return filepath.Join(b.cfg.Dir, id, "build.log") }

// Build builds the environment req asks for, or returns the ready one
// with the same fingerprint (unless Force): Begin, then Run. A failed
// build is stored as failed, with its log, and returned with an error.
func (b *Builder) Build(ctx context.Context, req Request) (*store.Environment, error) {
	p, err := b.Begin(ctx, req)
	if err != nil {
		return nil, err
	}
	if p.Existing {
		return p.Env, nil
	}
	return p.Run(ctx)
}

// Pending is a build begun: its checkout made and its plan read, its
// environment stored as building (or, Existing, the ready one it matches).
type Pending struct {
	Env *store.Environment
	// Existing: Env is a ready environment with the same fingerprint;
	// there is nothing to run.
	Existing bool

	b      *Builder
	req    Request
	plan   Plan
	dir    string
	ws     string
	unlock func()
}

// Begin makes the checkout, reads its plan and stores the environment as
// building (quick: no setup runs), holding the repository's build lock
// until Run ends; or finds the ready one with the same fingerprint. One
// build runs at a time per repository and backend: a second Begin waits
// for the first Run.
func (b *Builder) Begin(ctx context.Context, req Request) (*Pending, error) {
	if req.Repo == "" || req.Name == "" || req.Backend == "" || req.Checkout == nil {
		return nil, errors.New("environment: a build needs the repository, its name, a backend and a checkout")
	}
	unlock := b.lock(req.Repo + "\x00" + req.Backend)
	id := newID()
	dir := filepath.Join(b.cfg.Dir, id)
	ws := filepath.Join(dir, "workspace", req.Name)
	fail := func(err error) (*Pending, error) {
		os.RemoveAll(dir)
		unlock()
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(ws), 0o711); err != nil {
		return fail(err)
	}
	commit, err := req.Checkout(ctx, ws)
	if err != nil {
		return fail(fmt.Errorf("checking out %s: %w", req.Repo, err))
	}
	plan, err := Detect(ws)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", req.Repo, err))
	}
	plan = b.cfg.Defaults.For(req.Repo).apply(plan)
	fp := Fingerprint(req.Repo, commit, req.Backend, req.Image, b.cfg.Version, plan)
	if !req.Force {
		ready, err := b.cfg.Store.ListEnvironments(ctx, store.EnvironmentFilter{Repo: req.Repo, Backend: req.Backend, States: []string{store.EnvReady}})
		if err != nil {
			return fail(err)
		}
		for _, e := range ready {
			if e.Fingerprint == fp {
				os.RemoveAll(dir)
				unlock()
				return &Pending{Env: e, Existing: true}, nil
			}
		}
	}
	env := &store.Environment{ID: id, Repo: req.Repo, Name: req.Name, Ref: req.Ref, Commit: commit, Fingerprint: fp,
		Backend: req.Backend, State: store.EnvBuilding, Detected: plan.Detected, CreatedAt: b.cfg.Now().UTC(), User: req.User}
	if err := b.cfg.Store.CreateEnvironment(ctx, env); err != nil {
		return fail(err)
	}
	return &Pending{Env: env, b: b, req: req, plan: plan, dir: dir, ws: ws, unlock: unlock}, nil
}

// Run runs the setup of a begun build and records how it ended.
func (p *Pending) Run(ctx context.Context) (*store.Environment, error) {
	if p.Existing {
		return p.Env, nil
	}
	defer p.unlock()
	b, env, req, plan, dir, ws := p.b, p.Env, p.req, p.plan, p.dir, p.ws
	id := env.ID
	logf, err := os.OpenFile(b.LogPath(id), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return b.finish(env, fmt.Errorf("creating the build log: %w", err))
	}
	defer logf.Close()
	var out io.Writer = logf
	if req.Log != nil {
		out = io.MultiWriter(logf, req.Log)
	}
	if len(req.Env) > 0 {
		// The setup's output names no secret, whatever it prints.
		lr := &lineRedactor{w: out, r: secrets.EnvRedactor(req.Env)}
		defer lr.Flush()
		out = lr
	}
	switch {
	case plan.Setup == "":
		// Nothing runs, but the environment is one a box can start from
		// like any other: its HOME is the empty one a setup's box would
		// have begun with (sessions and `harvest run` layer theirs on it).
		if _, _, err := sandbox.PrepareDiskDir(sandbox.Spec{DiskDir: dir, User: b.cfg.User}); err != nil {
			return b.finish(env, fmt.Errorf("making the environment's HOME: %w", err))
		}
		start := ""
		if plan.Start != "" {
			start = " (its start script runs at every box start)"
		}
		fmt.Fprintf(out, "harvest: nothing to install for %s at %s: it has no %s and none of the files Harvest sets up from (%s); "+
			"the environment is its checkout and an empty HOME%s\n", req.Repo, shortSHA(env.Commit), SetupScript, strings.Join(DetectedFiles, ", "), start)
	default:
		fmt.Fprintf(out, "harvest: building %s for %s at %s: %s\n", id, req.Repo, shortSHA(env.Commit), strings.Join(plan.Detected, "; "))
		if err := b.setup(ctx, env, dir, ws, plan, req, out); err != nil {
			fmt.Fprintf(out, "harvest: the setup failed: %v\n", err)
			return b.finish(env, err)
		}
	}
	// The checkout itself is not kept: sessions make their own and get the
	// setup's files from the tar.
	os.RemoveAll(filepath.Join(dir, "workspace"))
	// Fails closed: what the scan could not read fails the build too.
	leaks, err := leakedSecrets(dir, req.Env)
	if len(leaks) > 0 {
		err = errors.Join(fmt.Errorf("the setup left setup secrets in the environment, where every session would see them: %s; "+
			"give a secret to the command that needs it, not to a file HOME or the checkout keeps (npm: NPM_CONFIG_USERCONFIG in /tmp, pip: PIP_INDEX_URL)",
			strings.Join(leaks, ", ")), err)
	}
	if err != nil {
		fmt.Fprintf(out, "harvest: %v\n", err)
		return b.finish(env, err)
	}
	os.RemoveAll(filepath.Join(dir, "tmp"))
	os.RemoveAll(sandbox.HomeLayerWork(sandbox.Spec{DiskDir: dir}))
	env.SizeBytes = duBytes(dir)
	fmt.Fprintf(out, "harvest: %s is ready (%s)\n", id, sandbox.FormatSize(env.SizeBytes))
	return b.finish(env, nil)
}

// setup runs the plan's setup in a box on the environment's checkout and
// HOME.
func (b *Builder) setup(ctx context.Context, env *store.Environment, dir, ws string, plan Plan, req Request, out io.Writer) error {
	p, err := b.cfg.Provider(req.Backend)
	if err != nil {
		return err
	}
	spec := sandbox.Spec{
		ID:         "hb-" + strings.TrimPrefix(env.ID, "env-"),
		User:       b.cfg.User,
		Workspaces: []sandbox.Workspace{{Name: req.Name, HostPath: ws}},
		DiskDir:    dir,
		Image:      req.Image,
		Timeout:    b.cfg.SetupTimeout + 5*time.Minute,
		Labels:     map[string]string{"harvest.environment": env.ID},
	}
	sctx, cancel := context.WithTimeout(ctx, b.cfg.SetupTimeout)
	defer cancel()
	box, err := p.Start(sctx, spec)
	if err != nil {
		return fmt.Errorf("starting the setup's box (%s): %w", req.Backend, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := box.Destroy(dctx); err != nil {
			b.cfg.Logger.Warn("destroying an environment's setup box", "environment", env.ID, "err", err)
		}
	}()
	cmdEnv := append(append([]string{"HARVEST_BOOT_MODE=setup"}, plan.Env...), req.Env...)
	if b.cfg.Egress != nil {
		br, eenv, err := agents.BridgeEgress(sctx, box, b.cfg.Egress, nil, env.ID, b.cfg.Logger)
		if err != nil {
			return err
		}
		defer br.Close()
		cmdEnv = append(cmdEnv, eenv...)
	}
	var tail tailBuffer
	w := io.MultiWriter(out, &tail)
	st, err := box.Run(sctx, &sandbox.Cmd{
		Args: []string{"sh", "-c", "set -e\n" + plan.Setup}, Env: cmdEnv, Dir: box.WorkspacePath(req.Name),
		Stdout: w, Stderr: w, OutputLimit: 64 << 20, Timeout: b.cfg.SetupTimeout,
	})
	if err != nil {
		if cause := context.Cause(sctx); cause != nil {
			return fmt.Errorf("the setup did not finish within %s", b.cfg.SetupTimeout)
		}
		return err
	}
	if !st.Success() {
		return fmt.Errorf("the setup %s; its last lines:\n%s", st, tail.String())
	}
	// What the setup left beyond the repository's files (untracked or
	// ignored: installed dependencies), as a tar made in the box, for the
	// sessions' fresh checkouts.
	var errb bytes.Buffer
	st, err = box.Run(sctx, &sandbox.Cmd{
		Args: []string{"sh", "-c", `{ if git rev-parse --git-dir >/dev/null 2>&1; then git ls-files -z --others; fi; } | tar --null -T - -cf /tmp/` + artifactsName},
		Dir:  box.WorkspacePath(req.Name), Stderr: &errb, OutputLimit: 64 << 10, Timeout: b.cfg.SetupTimeout,
	})
	if err != nil {
		return err
	}
	if !st.Success() {
		return fmt.Errorf("collecting the setup's files (%s): %s", st, strings.TrimSpace(errb.String()))
	}
	tarPath := filepath.Join(dir, "tmp", artifactsName)
	fi, err := os.Lstat(tarPath)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("the setup's files: %s is not a file the box made: %v", artifactsName, err)
	}
	// The same files as a tree, unpacked in the box, for the sessions'
	// checkouts' layer (Layer): never read by the host, only shown to
	// boxes, read-only.
	if b.layers(req.Backend) {
		errb.Reset()
		st, err = box.Run(sctx, &sandbox.Cmd{
			Args:   []string{"sh", "-c", `mkdir /tmp/` + layerName + ` && tar -xf /tmp/` + artifactsName + ` -C /tmp/` + layerName},
			Stderr: &errb, OutputLimit: 64 << 10, Timeout: b.cfg.SetupTimeout,
		})
		if err != nil {
			return err
		}
		if !st.Success() {
			return fmt.Errorf("unpacking the setup's files for the sessions' layer (%s): %s", st, strings.TrimSpace(errb.String()))
		}
		layerPath := filepath.Join(dir, "tmp", layerName)
		if fi, err := os.Lstat(layerPath); err != nil || !fi.IsDir() {
			return fmt.Errorf("the setup's files: %s is not a directory the box made: %v", layerName, err)
		}
		if err := os.Rename(layerPath, b.Layer(env.ID)); err != nil {
			return err
		}
	}
	return os.Rename(tarPath, b.Artifacts(env.ID))
}

// layerName is the tree of the files a setup left in the checkout.
const layerName = "harvest-layer"

// layers reports whether backend shows a workspace's layer (a
// sandbox.LayerProvider): its environments get one.
func (b *Builder) layers(backend string) bool {
	p, err := b.cfg.Provider(backend)
	if err != nil {
		return false
	}
	lp, ok := p.(sandbox.LayerProvider)
	return ok && lp.WorkspaceLayers()
}

// artifactsName is the tar of the files a setup left in the checkout.
const artifactsName = "harvest-artifacts.tar"

// finish records the end of a build.
func (b *Builder) finish(env *store.Environment, berr error) (*store.Environment, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := b.cfg.Store.UpdateEnvironment(ctx, env.ID, func(e *store.Environment) error {
		e.BuiltAt, e.SizeBytes = b.cfg.Now().UTC(), env.SizeBytes
		e.State, e.Error = store.EnvReady, ""
		if berr != nil {
			e.State, e.Error = store.EnvFailed, truncate(berr.Error(), 4000)
		}
		return nil
	})
	if berr != nil {
		// Only the log stays of a failed build.
		dir := filepath.Join(b.cfg.Dir, env.ID)
		entries, _ := os.ReadDir(dir)
		for _, de := range entries {
			if de.Name() != "build.log" {
				os.RemoveAll(filepath.Join(dir, de.Name()))
			}
		}
		if err != nil {
			return nil, errors.Join(berr, err)
		}
		return e, berr
	}
	return e, err
}

// Collect removes the environments no longer needed: of each repository
// and backend, every ready one older than the newest ready one and every
// failed one older than the newest ready one, unless inUse says a session
// still needs it (a session's HOME is layered on its environment's).
func (b *Builder) Collect(ctx context.Context, inUse func(id string) bool) (int, error) {
	all, err := b.cfg.Store.ListEnvironments(ctx, store.EnvironmentFilter{States: []string{store.EnvReady, store.EnvFailed}})
	if err != nil {
		return 0, err
	}
	newest := map[string]time.Time{} // repo+backend → newest ready's creation
	for _, e := range all {
		k := e.Repo + "\x00" + e.Backend
		if e.State == store.EnvReady && e.CreatedAt.After(newest[k]) {
			newest[k] = e.CreatedAt
		}
	}
	n := 0
	for _, e := range all {
		nt, ok := newest[e.Repo+"\x00"+e.Backend]
		if !ok || !e.CreatedAt.Before(nt) || inUse(e.ID) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(b.cfg.Dir, e.ID)); err != nil {
			return n, err
		}
		if _, err := b.cfg.Store.UpdateEnvironment(ctx, e.ID, func(x *store.Environment) error {
			x.State = store.EnvRemoved
			return nil
		}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "env-" + hex.EncodeToString(b[:])
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	if s == "" {
		return "its files"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// duBytes is the disk a tree takes (its files' blocks).
func duBytes(root string) int64 {
	var n int64
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// tailBuffer keeps the last lines written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

const tailBytes = 4 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if t.b.Len() > 2*tailBytes {
		keep := append([]byte(nil), t.b.Bytes()[t.b.Len()-tailBytes:]...)
		t.b.Reset()
		t.b.Write(keep)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.b.String()
	if len(s) > tailBytes {
		s = s[len(s)-tailBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimRight(s, "\n")
}
