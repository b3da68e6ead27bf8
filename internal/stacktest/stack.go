package stacktest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/postgres"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/workspace"
)

// Model is the default model of every stack: anthropic, served by the sim.
const Model = "anthropic/claude-sonnet-4-5"

// WaitTimeout bounds every wait for an event.
const WaitTimeout = 90 * time.Second

// Stack is one server's worth of machinery below the session layer. Its
// fields are the values a session.Config is built from; a test reads
// them and may replace Local (a restart), never the directories.
type Stack struct {
	T testing.TB

	DBPath   string // the SQLite file (Open opens it, unless StoreURL is set)
	StoreURL string // with WithPostgres: the PostgreSQL database Open opens instead
	RunDir   string // the local backend's
	DataDir  string // the sessions' data directory
	RepoRoot string // a directory holding Repo, and the default source root
	Repo     string // a small repository (a README) to give sessions
	Agent    string // the harvest-agent binary

	Sim     *Sim              // the model
	Key     string            // the model endpoint's API key
	Clock   *Clock            // for a Manager whose time the test moves
	Local   *local.Provider   // the local backend
	Docker  *docker.Provider  // with WithDocker: the docker backend
	Sources *workspace.Policy // the source policy: RepoRoot, or SourceRoots
	Pool    int               // the local backend's warm pool (WithPool)
	Disks   bool              // with WithDisks: the sessions get disks
}

type config struct {
	pool    int
	key     string
	docker  bool
	disks   bool
	roots   []string
	simHook func(*http.Request)
	inherit bool
	store   string // "sqlite" or "postgres"
}

func (c config) sourceRoots(repoRoot string) []string {
	if c.roots == nil {
		return []string{repoRoot}
	}
	return c.roots
}

// Option changes what New builds.
type Option func(*config)

// WithPool gives the local backend a warm pool of n boxes.
func WithPool(n int) Option { return func(c *config) { c.pool = n } }

// WithKey gives the model endpoint the API key k (default "sk-test").
func WithKey(k string) Option { return func(c *config) { c.key = k } }

// WithDocker adds the docker backend (its base image, a run dir of the
// test's own). Where docker is absent the test fails if docker is required
// (testreq.Docker) and is skipped otherwise.
func WithDocker(c *config) { c.docker = true }

// WithDisks turns sessions' disks on; the stack unmounts what is left of
// them under DataDir when the test ends, after the boxes are gone.
func WithDisks(c *config) { c.disks = true }

// EnvStore names the environment variable that chooses every stack's
// store when no option does: "postgres" (WithPostgres), or "sqlite" or
// nothing (the SQLite file). With it a package's whole suite runs on
// PostgreSQL: HARVEST_TEST_STORE=postgres go test ./session/.
const EnvStore = "HARVEST_TEST_STORE"

// WithPostgres keeps the stack's state in a fresh database of the test
// process's PostgreSQL server (testbin.Postgres) instead of the SQLite
// file: the package's TestMain must stop that server (testbin.Main).
func WithPostgres(c *config) { c.store = "postgres" }

// WithSQLite keeps the stack's state in the SQLite file DBPath, whatever
// $HARVEST_TEST_STORE says: for a test about that file.
func WithSQLite(c *config) { c.store = "sqlite" }

// storeKind is the store c asks for: its option's, else $HARVEST_TEST_STORE's.
func (c config) storeKind(t testing.TB) string {
	if c.store != "" {
		return c.store
	}
	switch v := os.Getenv(EnvStore); v {
	case "", "sqlite":
		return "sqlite"
	case "postgres":
		return "postgres"
	default:
		t.Fatalf("$%s is %q: want postgres or sqlite", EnvStore, v)
		return ""
	}
}

// SourceRoots makes roots the source policy's roots instead of RepoRoot.
func SourceRoots(roots ...string) Option { return func(c *config) { c.roots = roots } }

// SimHook has the sim call f with every request, before it answers it.
func SimHook(f func(*http.Request)) Option { return func(c *config) { c.simHook = f } }

// New builds a stack whose model plays script. It fails the test where the
// local backend is required and absent, and skips it elsewhere. The store
// is not open yet: Open opens it (a server that starts).
func New(t testing.TB, script string, opts ...Option) *Stack {
	t.Helper()
	c := config{key: "sk-test"}
	for _, o := range opts {
		o(&c)
	}
	s := &Stack{T: t, Key: c.key, Clock: NewClock(), Pool: c.pool, Disks: c.disks}
	s.Agent = testbin.Agent(t)
	if c.docker {
		s.addDocker()
	}
	s.Sim = StartSim(t, script, c.simHook)
	s.RunDir = testbin.TempDir(t)
	s.DataDir = testbin.TempDir(t)
	if s.Disks {
		t.Cleanup(s.unmountDisks)
	}
	s.DBPath = filepath.Join(t.TempDir(), "harvest.db")
	if c.storeKind(t) == "postgres" {
		// Dropped after every cleanup registered later: the store's.
		s.StoreURL = testbin.Postgres(t)
	}
	s.RepoRoot = testbin.TempDir(t)
	s.Repo = filepath.Join(s.RepoRoot, "repo")
	if err := os.Mkdir(s.Repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Repo, "README.md"), []byte("# a repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Sources = Policy(t, c.sourceRoots(s.RepoRoot)...)
	s.Local = s.NewLocal()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Local.Available(ctx); err != nil {
		testreq.Unavailable(t, testreq.Local, "the local sandbox backend is not available: %v", err)
	}
	// Runs after the Manager and the journal are closed: no box of this
	// test survives it.
	t.Cleanup(s.destroyLocalBoxes)
	return s
}

// addDocker opens the docker backend keeping one warm box, as harvest
// serve runs it (--pool): the boxes it can serve (no read-only mounts:
// not a CLI agent's) come from its pool.
func (s *Stack) addDocker() {
	p := docker.New(docker.Config{Image: testbin.DockerImage(), RunDir: testbin.TempDir(s.T), AgentBinary: s.Agent, PoolSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Available(ctx); err != nil {
		testreq.Unavailable(s.T, testreq.Docker, "the docker backend is not available: %v", err)
	}
	s.Docker = p
	s.T.Cleanup(func() {
		DestroyAll(s.T, p)
		p.Close() // its client's idle connections to dockerd
	})
}

// NewLocal returns a new local provider on the stack's run dir (with its
// pool), closed when the test ends: what a restarted server opens.
func (s *Stack) NewLocal() *local.Provider {
	p := local.New(local.Config{RunDir: s.RunDir, AgentBinary: s.Agent, PoolSize: s.Pool})
	s.T.Cleanup(func() { p.Close() })
	return p
}

// destroyLocalBoxes destroys every box in the run dir, through a provider
// of its own (the test may have closed or replaced Local).
func (s *Stack) destroyLocalBoxes() {
	p := local.New(local.Config{RunDir: s.RunDir, AgentBinary: s.Agent})
	defer p.Close()
	DestroyAll(s.T, p)
}

// DestroyLocalBoxes destroys every box of the local backend, as a reboot
// of the host would.
func (s *Stack) DestroyLocalBoxes() { s.destroyLocalBoxes() }

func (s *Stack) unmountDisks() {
	if _, err := disk.UnmountUnder(s.DataDir); err != nil {
		s.T.Error(err)
	}
}

// Backends is the Config.Backends of a Manager on this stack: local, and
// docker with WithDocker.
func (s *Stack) Backends(name string) (sandbox.Provider, error) {
	switch {
	case name == local.Name:
		return s.Local, nil
	case name == docker.Name && s.Docker != nil:
		return s.Docker, nil
	}
	return nil, fmt.Errorf("unknown backend %q: these tests run local (and docker with WithDocker)", name)
}

// Models is the model configuration: the anthropic endpoint is the sim,
// and a failed request is not retried.
func (s *Stack) Models() providers.Config {
	return providers.Config{
		Endpoints: map[string]providers.Endpoint{"anthropic": {API: "anthropic", BaseURL: s.Sim.URL, APIKey: s.Key}},
		Retry:     llm.RetryPolicy{MaxAttempts: 1},
	}
}

// Logger is the logger of the stack's components (testbin.Logger).
func (s *Stack) Logger() *slog.Logger { return testbin.Logger() }

// Open opens the store (PostgreSQL at StoreURL, else SQLite at DBPath) and
// a journal on it (opts.Logger defaults to the stack's), closed when the test ends: after whatever the test registers
// later, such as the Manager using them. Closing them earlier (a graceful
// restart) is the test's to do; the cleanup then closes them again, which
// both allow.
func (s *Stack) Open(opts journal.Options) (store.Store, *journal.Journal) {
	s.T.Helper()
	st, err := s.OpenStore()
	if err != nil {
		s.T.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = s.Logger()
	}
	// As harvest serve's: an API request's store calls are bounded by
	// its budget (server.Config.StoreTimeout).
	st = store.Bounded(st)
	j := journal.New(st, opts)
	s.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := j.Close(ctx); err != nil {
			s.T.Errorf("closing the journal: %v", err)
		}
		st.Close()
	})
	return st, j
}

// OpenStore opens the stack's store, PostgreSQL at StoreURL or else SQLite
// at DBPath; closing it is the caller's to do.
func (s *Stack) OpenStore() (store.Store, error) {
	if s.StoreURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return postgres.Open(ctx, s.StoreURL)
	}
	return sqlite.Open(s.DBPath)
}

// Boxes lists the ids of the boxes running in the local run dir, sorted.
func (s *Stack) Boxes() []string {
	s.T.Helper()
	return BoxIDs(s.T, s.Local)
}

// Policy is a source policy whose roots are roots.
func Policy(t testing.TB, roots ...string) *workspace.Policy {
	t.Helper()
	p, err := workspace.NewPolicy(roots, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The environment through which a child process (a test binary that
// plays a server to be killed) gets its parent's stack.
const (
	envDB      = "HARVEST_STACKTEST_DB"
	envStore   = "HARVEST_STACKTEST_STORE_URL"
	envRunDir  = "HARVEST_STACKTEST_RUN_DIR"
	envDataDir = "HARVEST_STACKTEST_DATA_DIR"
	envRepo    = "HARVEST_STACKTEST_REPO"
	envSim     = "HARVEST_STACKTEST_SIM"
	envAgent   = "HARVEST_STACKTEST_AGENT"
)

// Environ is the environment that lets a child process Inherit this stack.
func (s *Stack) Environ() []string {
	return []string{
		envDB + "=" + s.DBPath, envStore + "=" + s.StoreURL, envRunDir + "=" + s.RunDir, envDataDir + "=" + s.DataDir,
		envRepo + "=" + s.Repo, envSim + "=" + s.Sim.URL, envAgent + "=" + s.Agent,
	}
}

// Inherit is, in a child process, the stack its parent passed with
// Environ: the same store, run dir, data dir, repository, model and agent,
// and a fresh clock; opts as for New (docker and disks excepted). It
// removes nothing when the test ends (the parent owns it all) and reports
// false when the process is no such child.
func Inherit(t testing.TB, opts ...Option) (*Stack, bool) {
	t.Helper()
	if os.Getenv(envDB) == "" {
		return nil, false
	}
	c := config{key: "sk-test"}
	for _, o := range opts {
		o(&c)
	}
	if c.docker || c.disks {
		t.Fatal("stacktest.Inherit: a child stack has no docker backend and no disks of its own")
	}
	s := &Stack{
		T: t, Key: c.key, Clock: NewClock(), Pool: c.pool,
		DBPath: os.Getenv(envDB), StoreURL: os.Getenv(envStore), RunDir: os.Getenv(envRunDir), DataDir: os.Getenv(envDataDir),
		Repo: os.Getenv(envRepo), Sim: &Sim{URL: os.Getenv(envSim)}, Agent: os.Getenv(envAgent),
	}
	s.RepoRoot = filepath.Dir(s.Repo)
	s.Sources = Policy(t, c.sourceRoots(s.RepoRoot)...)
	s.Local = s.NewLocal()
	return s, true
}
