package session

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
)

// Environments finds repositories' prepared environments (package
// environment's Builder). A session on a repository that has a ready one
// starts from it: the environment's HOME is the lower layer of the
// session's HOME (sandbox.Spec.HomeLayer), and what its setup left in the
// checkout beyond the repository's files (node_modules, .venv, ...) is
// copied into the session's fresh checkout, in the box. The environment is
// chosen at create and kept for the session's life (its HOME's changes
// are layered on that one), so a newer environment serves new sessions
// only.
type Environments interface {
	// Latest is the newest ready environment of repo on backend (nil:
	// none).
	Latest(ctx context.Context, repo, backend string) (*store.Environment, error)
	Get(ctx context.Context, id string) (*store.Environment, error)
	// Home and Workspace are where an environment's HOME and checkout are.
	Home(id string) string
	Workspace(e *store.Environment) string
}

// EnvMount is where a box sees its environment's checkout, read-only:
// EnvMount/NAME.
const EnvMount = "/opt/harvest-env"

// RepoKey names a session's repository for environments: "github:owner/name"
// for a GitHub repository, else what its source resolved to.
func RepoKey(r store.Repo) string {
	if r.GitHub != "" {
		return "github:" + strings.ToLower(r.GitHub)
	}
	return origin(r)
}

// chooseEnvironment is the environment a new session starts from: the
// first repository's newest ready one on the session's backend.
func (m *Manager) chooseEnvironment(ctx context.Context, s *store.Session) string {
	if m.cfg.Environments == nil || len(s.Repos) == 0 {
		return ""
	}
	e, err := m.cfg.Environments.Latest(ctx, RepoKey(s.Repos[0]), s.Backend)
	if err != nil {
		m.log.Warn("looking for a prepared environment; the session starts cold", "repo", RepoKey(s.Repos[0]), "err", err)
		return ""
	}
	if e == nil {
		return ""
	}
	return e.ID
}

// environment adds the session's environment to its box's spec: its HOME
// layer (on a box with a disk) and its checkout, read-only.
func (r *runner) environment(spec *sandbox.Spec) (*store.Environment, error) {
	envs := r.d.cfg.Environments
	if r.s.Environment == "" || envs == nil || len(r.s.Repos) == 0 {
		return nil, nil
	}
	e, err := envs.Get(r.ctx, r.s.Environment)
	if err != nil {
		return nil, fmt.Errorf("the session's environment %s: %w", r.s.Environment, err)
	}
	if e.State != store.EnvReady {
		return nil, fatal(fmt.Errorf("the session's environment %s is %s: start a new session", e.ID, e.State))
	}
	if spec.DiskDir != "" {
		spec.HomeLayer = envs.Home(e.ID)
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{HostPath: envs.Workspace(e), BoxPath: EnvMount + "/" + r.s.Repos[0].Name})
	return e, nil
}

// fromEnvironment copies, in the box, what the environment's setup left
// in its checkout beyond the repository's files (untracked or ignored:
// installed dependencies) into the session's fresh checkout.
func (r *runner) fromEnvironment(ctx context.Context, sb *sandbox.Sandbox, repo store.Repo) error {
	src := EnvMount + "/" + repo.Name
	script := `cd "$1" || exit 1
if git rev-parse --git-dir >/dev/null 2>&1; then git ls-files -z --others; fi | tar --null -T - -cf - | tar -C "$2" -xf -`
	var errb bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script, "sh", src, sb.WorkspacePath(repo.Name)},
		Stderr: &errb, OutputLimit: 64 << 10, Timeout: 10 * time.Minute})
	if err != nil {
		return err
	}
	if !st.Success() {
		return fatal(fmt.Errorf("copying the prepared environment's files into %s (%s): %s", repo.Name, st, strings.TrimSpace(errb.String())))
	}
	return nil
}

// startScript runs the first repository's .harvest/start.sh, if it has
// one, at every box start (HARVEST_BOOT_MODE=start): a failure fails the
// start, with its output.
func (r *runner) startScript(ctx context.Context, sb *sandbox.Sandbox) error {
	if len(r.s.Repos) == 0 {
		return nil
	}
	repo := r.s.Repos[0]
	var out bytes.Buffer
	script := `[ -f .harvest/start.sh ] || exit 0; set -e; . ./.harvest/start.sh`
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Env: []string{"HARVEST_BOOT_MODE=start"},
		Dir: sb.WorkspacePath(repo.Name), Stdout: &out, Stderr: &out, OutputLimit: 64 << 10, Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	if !st.Success() {
		return fatal(fmt.Errorf("%s's .harvest/start.sh failed (%s): %s", repo.Name, st, tail(out.String(), 2000)))
	}
	return nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
