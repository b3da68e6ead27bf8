package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store"
)

// Environments finds repositories' prepared environments (package
// environment's Builder). A session on a repository that has a ready one
// starts from it: the environment's HOME is the lower layer of the
// session's HOME (sandbox.Spec.HomeLayer), and what its setup left in the
// checkout beyond the repository's files (node_modules, .venv, ...) is the
// lower layer of the session's checkout where the backend takes one
// (sandbox.Workspace.Layer), else copied into the session's fresh
// checkout, in the box. The environment is
// chosen at create and kept for the session's life (its HOME's changes
// are layered on that one), so a newer environment serves new sessions
// only.
type Environments interface {
	// Latest is the newest ready environment of repo on backend (nil:
	// none).
	Latest(ctx context.Context, repo, backend string) (*store.Environment, error)
	Get(ctx context.Context, id string) (*store.Environment, error)
	// Home is an environment's HOME; Artifacts the tar of what its setup
	// left in the checkout (a file its setup's box made: only ever copied
	// by the host, unpacked in a box).
	Home(id string) string
	Artifacts(id string) string
	// Layer is the same files as Artifacts as a tree (made by the
	// setup's box; missing for environments built before layers), shown
	// under the checkout by backends that take a workspace layer.
	Layer(id string) string
}

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

// envReason says what a session starts from, when the server prepares
// environments: its environment, or cold.
func (r *runner) envReason() string {
	switch {
	case r.d.cfg.Environments == nil || len(r.s.Repos) == 0:
		return ""
	case r.s.Environment != "":
		return "starting from the prepared environment " + r.s.Environment
	default:
		return "starting cold: " + r.s.Repos[0].Name + " has no prepared environment on " + r.s.Backend + " (harvest prepare makes one)"
	}
}

// environment adds the session's environment to its box's spec (its HOME
// layer, on a box with a disk) and puts its artifacts into the first
// repository's fresh checkout (a copy of a file: nothing of it runs on the
// host); it returns whether the box must unpack them.
//
// On a backend that takes workspace layers (sandbox.LayerProvider), with a
// disk, the files are not copied: the environment's tree of them
// (Environments.Layer) is shown under the checkout, read-only, copy-on-write
// into it (sandbox.Workspace.Layer), for the price of a mount whatever
// their size. The checkout then holds only the session's own changes to
// them, so every box of the session gets the layer again: a marker on its
// disk's box dir (Harvest's: the box never sees it) records that the
// checkout was made for one.
func (r *runner) environment(spec *sandbox.Spec, fresh map[string]copied) (bool, error) {
	envs := r.d.cfg.Environments
	if r.s.Environment == "" || envs == nil || len(r.s.Repos) == 0 {
		return false, nil
	}
	e, err := envs.Get(r.ctx, r.s.Environment)
	if err != nil {
		return false, fmt.Errorf("the session's environment %s: %w", r.s.Environment, err)
	}
	if e.State != store.EnvReady {
		return false, fatal(fmt.Errorf("the session's environment %s is %s: start a new session", e.ID, e.State))
	}
	if _, err := os.Stat(envs.Home(e.ID)); err != nil {
		// Prepared on another node, whose disk has its files (or
		// recorded without a HOME by an older Harvest, when nothing
		// needed installing): this box starts without them (the
		// workspace, carried, has the rest).
		r.log.Warn("the session's environment has no files on this node (prepared on another one, or recorded without a HOME by an older Harvest): the box starts without its HOME layer", "environment", e.ID)
		return false, nil
	}
	if spec.DiskDir != "" {
		spec.HomeLayer = envs.Home(e.ID)
	}
	repo := r.s.Repos[0]
	_, isFresh := fresh[repo.Name]
	if layered, err := r.layer(spec, envs.Layer(e.ID), repo.Name, isFresh); err != nil || layered {
		return false, err
	}
	if !isFresh {
		return false, nil
	}
	_, owner := boxUser()
	placed, err := environment.PlaceArtifacts(envs.Artifacts(e.ID), repo.Path, owner)
	if err != nil {
		return false, fmt.Errorf("giving %s its environment's files: %s", repo.Name, r.d.host.hideDataDir(err.Error()))
	}
	return placed, nil
}

// layerMarker, in a box's disk dir, records that its session's first
// checkout was made for its environment's layer.
const layerMarker = ".env-layer"

// layer gives the workspace name of spec the environment's layer when the
// backend takes one and the checkout is (fresh) or was made for it.
func (r *runner) layer(spec *sandbox.Spec, layer, name string, fresh bool) (bool, error) {
	if spec.DiskDir == "" {
		return false, nil
	}
	p, err := r.d.host.provider(r.s.Backend)
	if err != nil {
		return false, nil
	}
	if lp, ok := p.(sandbox.LayerProvider); !ok || !lp.WorkspaceLayers() {
		return false, nil
	}
	if fi, err := os.Stat(layer); err != nil || !fi.IsDir() {
		return false, nil // built before layers: its tar is unpacked
	}
	marker := filepath.Join(spec.DiskDir, layerMarker)
	if fresh {
		if err := os.WriteFile(marker, []byte(r.s.Environment+"\n"), 0o600); err != nil {
			return false, fmt.Errorf("recording the checkout's environment layer: %w", r.d.host.hostFull(err))
		}
	} else if _, err := os.Stat(marker); err != nil {
		return false, nil // a checkout made with the files unpacked into it
	}
	for i := range spec.Workspaces {
		if spec.Workspaces[i].Name == name {
			spec.Workspaces[i].Layer = layer
			return true, nil
		}
	}
	return false, nil
}

// fromEnvironment unpacks the environment's artifacts into the fresh
// checkout, in the box.
func (r *runner) fromEnvironment(ctx context.Context, sb *sandbox.Sandbox, repo store.Repo) error {
	return useErr(environment.UnpackArtifacts(ctx, sb, repo.Name))
}

// startScript runs the first repository's .harvest/start.sh, if it has
// one, else the server's for it, at every box start (HARVEST_BOOT_MODE=start):
// a failure fails the start, with its output.
func (r *runner) startScript(ctx context.Context, sb *sandbox.Sandbox) error {
	if len(r.s.Repos) == 0 {
		return nil
	}
	repo := r.s.Repos[0]
	serverStart := ""
	if ss, ok := r.d.cfg.Environments.(interface{ StartScript(repo string) string }); ok {
		serverStart = ss.StartScript(RepoKey(repo))
	}
	return useErr(environment.RunStart(ctx, sb, repo.Name, serverStart))
}

// useErr makes a box that cannot start from its environment fatal to the
// session: starting it again would fail the same way.
func useErr(err error) error {
	var ue *environment.UseError
	if errors.As(err, &ue) {
		return fatal(err)
	}
	return err
}

// redactPayload masks the session's secrets in an event's payload (its
// JSON form, then the same type again): what an agent prints of a secret
// it was given is never stored or streamed.
func redactPayload(r *secrets.Redactor, p event.Payload) event.Payload {
	if r == nil {
		return p
	}
	b, err := json.Marshal(p)
	if err != nil {
		return p
	}
	red := r.Redact(string(b))
	if red == string(b) {
		return p
	}
	q, err := event.Decode(p.EventType(), []byte(red))
	if err != nil {
		return p
	}
	return q
}
