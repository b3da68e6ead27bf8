package session

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/wire"
)

// maxListedSources bounds GET /v1/sources' repositories.
const maxListedSources = 1000

// Sources lists what sessions may name, for a form to offer: the
// directories under the source policy's roots (their names only are read,
// never their contents, except whether .git is there), the git hosts,
// whether owner/name (GitHub) works, and whether the caller (admin) may
// name any directory.
func (m *Manager) Sources(admin bool) wire.SourceList {
	out := wire.SourceList{Repositories: []wire.SourceEntry{}, GitHosts: []string{}, GitHub: m.cfg.Forge != nil, AnyDirectory: admin}
	p := m.cfg.Sources
	if p == nil {
		return out
	}
	out.GitHosts = append(out.GitHosts, p.GitHosts...)
	for _, root := range p.Roots {
		ents, err := os.ReadDir(root)
		if err != nil {
			m.log.Warn("listing a repository root", "root", root, "err", err)
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue // symlinks and files too: only what is plainly a directory of the root
			}
			if len(out.Repositories) == maxListedSources {
				out.Truncated = true
				break
			}
			dir := filepath.Join(root, e.Name())
			fi, err := os.Lstat(filepath.Join(dir, ".git"))
			out.Repositories = append(out.Repositories, wire.SourceEntry{Name: e.Name(), Source: dir, Git: err == nil && fi.IsDir()})
		}
	}
	slices.SortFunc(out.Repositories, func(a, b wire.SourceEntry) int { return strings.Compare(a.Source, b.Source) })
	return out
}
