package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

var _ EnvBuilder = (*environment.Builder)(nil)

// EnvBuilder is an Environments that can build them (package
// environment's Builder): what Prepare needs.
type EnvBuilder interface {
	Environments
	Begin(ctx context.Context, req environment.Request) (*environment.Pending, error)
	LogPath(id string) string
	List(ctx context.Context, f store.EnvironmentFilter) ([]*store.Environment, error)
	Collect(ctx context.Context, inUse func(id string) bool) (int, error)
}

// PrepareRequest is an environment to prepare.
type PrepareRequest struct {
	// Repo is the repository, as in a session: a source (a directory on
	// the server, a git URL) or GitHub's owner/name.
	Repo RepoSpec
	// Backend it is for ("" the server's default).
	Backend string
	// Force builds even when the ready one has the same fingerprint.
	Force bool
	// Admin: see CreateRequest.Admin.
	Admin bool
	// User is the user who asks (store.Environment.User).
	User string
}

// Prepare begins building a repository's environment and returns it as
// building (or the ready one with the same fingerprint): its checkout and
// plan are made before it returns; the setup runs in the background, on
// a goroutine Close waits for. The source policy is a session's.
func (m *Manager) Prepare(ctx context.Context, req PrepareRequest) (*store.Environment, error) {
	b, ok := m.cfg.Environments.(EnvBuilder)
	if !ok || b == nil {
		return nil, &InputError{Problems: []string{"this server builds no environments"}}
	}
	if err := m.refusing(); err != nil {
		return nil, fmt.Errorf("preparing an environment: %w, try again when it is back", err)
	}
	backend := req.Backend
	if backend == "" {
		backend = m.cfg.DefaultBackend
	}
	var problems []string
	if _, err := m.provider(backend); err != nil {
		problems = append(problems, "backend: "+err.Error())
	}
	r := req.Repo
	var repo store.Repo
	if r.GitHub == "" && m.cfg.Forge != nil {
		if name, ok := m.cfg.Forge.Parse(r.Source); ok {
			r.GitHub, r.Source = name, ""
		}
	}
	switch {
	case r.GitHub != "":
		name, fp, err := m.checkForgeRepo(ctx, 0, r)
		if err != nil {
			return nil, err
		}
		problems = append(problems, fp...)
		repo = store.Repo{Name: baseName(name), Source: name, GitHub: name, Ref: r.Ref, Branch: "harvest/environment"}
	default:
		src, err := m.cfg.Sources.Resolve(r.Source, req.Admin)
		if err != nil {
			problems = append(problems, "repo.source: "+err.Error())
			break
		}
		repo = store.Repo{Name: src.Name(), Source: r.Source, Origin: src.String(), Ref: r.Ref}
	}
	if r.Name != "" {
		repo.Name = r.Name
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	_, owner := boxUser()
	checkout := func(ctx context.Context, dst string) (string, error) {
		if repo.GitHub != "" {
			s := &store.Session{ID: "environment", Repos: []store.Repo{repo}}
			if err := m.cfg.Forge.Checkout(ctx, s, &s.Repos[0], dst, owner); err != nil {
				return "", err
			}
			return s.Repos[0].Head, nil
		}
		src, _, err := m.copySource(&store.Session{}, repo)
		if err != nil {
			return "", err
		}
		if _, err := workspace.Prepare(ctx, src, dst, owner, m.cfg.Clone); err != nil {
			return "", err
		}
		return workspace.ReadHead(dst), nil
	}
	if err := m.admit("preparing an environment"); err != nil {
		return nil, err
	}
	var env []string
	if repo.GitHub != "" && m.cfg.SetupSecrets != nil {
		var err error
		if env, err = m.cfg.SetupSecrets(ctx, repo.GitHub); err != nil {
			return nil, fmt.Errorf("the setup secrets of %s: %w", repo.GitHub, err)
		}
	}
	p, err := b.Begin(ctx, environment.Request{Repo: RepoKey(repo), Name: repo.Name, Ref: repo.Ref, Backend: backend,
		Checkout: checkout, Force: req.Force, Env: env, User: req.User})
	if err != nil {
		return nil, m.hideErr(err)
	}
	if p.Existing {
		return p.Env, nil
	}
	m.builds.Add(1)
	go func() {
		defer m.builds.Done()
		if _, err := p.Run(m.base); err != nil && m.base.Err() == nil {
			m.log.Warn("an environment's build failed", "environment", p.Env.ID, "repo", p.Env.Repo, "err", err)
		}
	}()
	return p.Env, nil
}

// EnvironmentLog copies an environment's build log to w; with follow, it
// goes on until the build ends (or ctx does).
func (m *Manager) EnvironmentLog(ctx context.Context, id string, follow bool, w io.Writer) error {
	b, ok := m.cfg.Environments.(EnvBuilder)
	if !ok || b == nil {
		return fmt.Errorf("environment %s: %w", id, ErrNotFound)
	}
	if _, err := b.Get(ctx, id); err != nil {
		return err
	}
	var off int64
	for {
		f, err := os.Open(b.LogPath(id))
		if err == nil {
			f.Seek(off, io.SeekStart)
			n, _ := io.Copy(w, f)
			off += n
			f.Close()
			if fl, ok := w.(interface{ Flush() }); ok && n > 0 {
				fl.Flush()
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		e, err := b.Get(ctx, id)
		if err != nil {
			return err
		}
		if !follow || e.State != store.EnvBuilding {
			if err == nil && follow {
				// The last lines, written before the state changed.
				if f, err := os.Open(b.LogPath(id)); err == nil {
					f.Seek(off, io.SeekStart)
					io.Copy(w, f)
					f.Close()
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // a log file has no change notification here
		}
	}
}

// Environments lists the prepared environments.
func (m *Manager) ListEnvironments(ctx context.Context, f store.EnvironmentFilter) ([]*store.Environment, error) {
	b, ok := m.cfg.Environments.(EnvBuilder)
	if !ok || b == nil {
		return []*store.Environment{}, nil
	}
	return b.List(ctx, f)
}

// GetEnvironment reads one.
func (m *Manager) GetEnvironment(ctx context.Context, id string) (*store.Environment, error) {
	if m.cfg.Environments == nil {
		return nil, fmt.Errorf("environment %s: %w", id, ErrNotFound)
	}
	return m.cfg.Environments.Get(ctx, id)
}

func baseName(repo string) string {
	for i := len(repo) - 1; i >= 0; i-- {
		if repo[i] == '/' {
			return repo[i+1:]
		}
	}
	return repo
}

// hideErr hides the data directory in an error a caller sees.
func (m *Manager) hideErr(err error) error {
	if IsInput(err) {
		return err
	}
	return errors.New(m.hideDataDir(err.Error()))
}
