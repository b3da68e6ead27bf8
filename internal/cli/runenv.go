package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/workspace"
)

// preparedEnv is the prepared environment a `harvest run` starts from: the
// newest ready one of its first repository on its backend, as the local
// server (harvest serve's data directory) prepared it — the same one a
// session on that repository would start from.
type preparedEnv struct {
	env *store.Environment
	dir string // the server's environments directory
}

// findPreparedEnv looks for src's environment in the server data directory
// data; nil when there is none (no server data, none prepared, --cold).
// Only a directory or a URL as `harvest serve` would name it matches: the
// key is the one sessions use (package session's RepoKey).
func findPreparedEnv(ctx context.Context, data string, src workspace.Source, backend string) (*preparedEnv, error) {
	db := filepath.Join(data, "harvest.db")
	if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	key := src.URL
	if src.Path != "" {
		resolved, err := filepath.EvalSymlinks(src.Path)
		if err != nil {
			return nil, err
		}
		key = resolved
	}
	st, err := sqlite.Open(db)
	if err != nil {
		return nil, fmt.Errorf("reading the prepared environments in %s: %w (--cold starts without one)", data, err)
	}
	defer st.Close()
	es, err := st.ListEnvironments(ctx, store.EnvironmentFilter{Repo: key, Backend: backend, States: []string{store.EnvReady}})
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return &preparedEnv{env: es[0], dir: filepath.Join(data, "environments")}, nil
}

// apply gives the box spec the environment's HOME (a box with a disk:
// boxDir, made here when the run has none) and the first workspace,
// checkout, its artifacts: as a layer under it when the backend takes one
// (layers) and the environment has one, else copied for the box to
// unpack; it reports whether the box must unpack them.
func (e *preparedEnv) apply(spec *sandbox.Spec, boxDir, checkout string, owner workspace.Owner, layers bool, stderr io.Writer) (bool, error) {
	if spec.DiskDir == "" {
		if err := os.Mkdir(boxDir, 0o700); err != nil {
			return false, err
		}
		spec.DiskDir = boxDir
	}
	at := e.env.Commit
	if len(at) > 12 {
		at = at[:12]
	}
	if e.env.Ref != "" {
		at = e.env.Ref + " at " + at
	}
	fmt.Fprintf(stderr, "harvest: starting from the prepared environment %s (%s, built %s; --cold starts without it)\n",
		e.env.ID, at, e.env.BuiltAt.Local().Format("2006-01-02 15:04"))
	home := filepath.Join(e.dir, e.env.ID, "home")
	switch _, err := os.Stat(home); {
	case err == nil:
		spec.HomeLayer = home
	case errors.Is(err, fs.ErrNotExist):
		// Recorded without one (by an older Harvest, which kept no HOME
		// when nothing needed installing) or prepared on another node:
		// the box starts with a fresh HOME, as a session does.
		fmt.Fprintf(stderr, "harvest: the prepared environment %s has no HOME on this machine: the box starts with a fresh one (harvest prepare --force rebuilds it)\n", e.env.ID)
	default:
		return false, err
	}
	layer := filepath.Join(e.dir, e.env.ID, "checkout")
	if fi, err := os.Stat(layer); layers && err == nil && fi.IsDir() {
		for i := range spec.Workspaces {
			if spec.Workspaces[i].HostPath == checkout {
				spec.Workspaces[i].Layer = layer
				return false, nil
			}
		}
	}
	return environment.PlaceArtifacts(filepath.Join(e.dir, e.env.ID, "artifacts.tar"), checkout, owner)
}
