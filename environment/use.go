package environment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/workspace"
)

// How a box starts from a ready environment — the same for a session
// (package session) and for `harvest run`:
//
//	host: spec.HomeLayer = Home(id)          (a box with a disk)
//	host: the checkout's Workspace.Layer = Layer(id)   (a backend that takes
//	      layers, a box with a disk, an environment built with one), else:
//	host: PlaceArtifacts(Artifacts(id), checkout)   a copy of a file into .git
//	box:  UnpackArtifacts                     tar -xf in the checkout, in the box
//	box:  RunStart                            .harvest/start.sh, else the server's
//
// Host code copies the artifacts' tar (a file a setup box made) but never
// reads it: it is unpacked in the box, which is the only place its paths
// mean anything.

// ArtifactsTar is where a fresh checkout gets its environment's
// artifacts, to be unpacked in the box (inside .git: never part of the
// repository).
const ArtifactsTar = ".git/harvest-env.tar"

// PlaceArtifacts copies an environment's artifacts (Builder.Artifacts)
// into checkout (a fresh checkout Harvest made, a git repository) for
// UnpackArtifacts, owned by owner. It reports false, doing nothing, when
// there are none (no setup ran) or the checkout is not a git repository.
func PlaceArtifacts(artifacts, checkout string, owner workspace.Owner) (bool, error) {
	src, err := os.Open(artifacts)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer src.Close()
	if _, err := os.Stat(filepath.Join(checkout, ".git")); err != nil {
		return false, nil // not a git checkout: its environment's files do not apply
	}
	path := filepath.Join(checkout, ArtifactsTar)
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && owner != (workspace.Owner{}) {
		err = os.Chown(path, owner.UID, owner.GID)
	}
	return err == nil, err
}

// UnpackArtifacts unpacks what PlaceArtifacts put into the workspace
// name, in the box sb. A failure is an *UseError.
func UnpackArtifacts(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	var errb bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", `tar -xf "$1" && rm -f "$1"`, "sh", ArtifactsTar},
		Dir: sb.WorkspacePath(name), Stderr: &errb, OutputLimit: 64 << 10, Timeout: 10 * time.Minute})
	if err != nil {
		return err
	}
	if !st.Success() {
		return &UseError{fmt.Sprintf("unpacking the prepared environment's files into %s (%s): %s", name, st, strings.TrimSpace(errb.String()))}
	}
	return nil
}

// RunStart runs the workspace name's .harvest/start.sh, else server (the
// server's start script for the repository, "" for none), in the box sb
// (HARVEST_BOOT_MODE=start). A failing script is an *UseError with its
// output's tail.
func RunStart(ctx context.Context, sb *sandbox.Sandbox, name, server string) error {
	var out bytes.Buffer
	script := `if [ -f .harvest/start.sh ]; then set -e; . ./.harvest/start.sh
elif [ -n "$HARVEST_SERVER_START" ]; then set -e; eval "$HARVEST_SERVER_START"; fi`
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Env: []string{"HARVEST_BOOT_MODE=start", "HARVEST_SERVER_START=" + server},
		Dir: sb.WorkspacePath(name), Stdout: &out, Stderr: &out, OutputLimit: 64 << 10, Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	if !st.Success() {
		return &UseError{fmt.Sprintf("%s's start script (.harvest/start.sh, or the server's) failed (%s): %s", name, st, tail(out.String(), 2000))}
	}
	return nil
}

// UseError is a box that cannot start from its environment for a reason
// starting it again will not change (a script failed, the files do not
// unpack).
type UseError struct{ Msg string }

func (e *UseError) Error() string { return e.Msg }

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
