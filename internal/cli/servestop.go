package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/owner"
	"github.com/harvest-dev/harvest/session"
)

// Which boxes are a server's
//
// A server's boxes are recorded with its owner (package sandbox/owner): the
// name in DATA/server-id, made at its first start, so every server of one
// data directory (the next start, which reattaches them, or nodes sharing
// it) is the same owner. Each holds it, with a shared flock, while it runs;
// `harvest sandbox prune` destroys only the boxes of owners nobody holds.
// A name kept in the data directory rather than one derived from its path:
// a data directory moved or reached through another path stays the owner
// of its boxes.

// serverIDFile names the server's owner in the data directory.
const serverIDFile = "server-id"

// serverOwnerID reads DATA/server-id, making it on first start.
func serverOwnerID(data string) (string, error) {
	path := filepath.Join(data, serverIDFile)
	for range 2 {
		b, err := os.ReadFile(path)
		if err == nil {
			id := strings.TrimSpace(string(b))
			if err := owner.CheckID(id); err != nil {
				return "", fmt.Errorf("%s: %w (remove the file: the next start makes a new one, and the boxes of the old one are then no server's: harvest sandbox prune removes them)", path, err)
			}
			return id, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("reading the server's id: %w", err)
		}
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue // another node of this data directory made it first
		}
		if err != nil {
			return "", fmt.Errorf("writing the server's id: %w", err)
		}
		id := "serve-" + hex.EncodeToString(r[:])
		_, err = f.WriteString(id + "\n")
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return "", fmt.Errorf("writing the server's id: %w", err)
		}
		return id, nil
	}
	return "", fmt.Errorf("reading the server's id: %s keeps changing", path)
}

// ownerWait bounds how long a starting server waits for a prune that is
// destroying its boxes.
const ownerWait = 2 * time.Minute

// holdServerOwner holds the server's owner (shared with the other servers
// of the data directory) for as long as it runs; it waits while harvest
// sandbox prune destroys the boxes of that owner.
func holdServerOwner(ctx context.Context, data string, stderr io.Writer) (*owner.Hold, error) {
	id, err := serverOwnerID(data)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ownerWait)
	defer cancel()
	h, err := owner.Share(ctx, backends.Options{}.OwnersDir(), id, func() {
		fmt.Fprintln(stderr, "harvest: harvest sandbox prune is destroying the boxes of this data directory's server; waiting for it to finish")
	})
	if err != nil {
		return nil, fmt.Errorf("owning this server's boxes: %w", err)
	}
	return h, nil
}

// sweepOwnBoxes destroys what is left of the boxes of a server stopping
// for good (--stop-boxes-on-exit) once its sessions released theirs: a
// box whose runner did not stop in time, or one a session had before a
// crash. Not when other servers share the data directory (and so the
// owner): those are theirs.
func sweepOwnBoxes(h *owner.Hold, stderr io.Writer, logger *slog.Logger) {
	if !h.Sole() {
		logger.Info("other servers share the data directory: the boxes of their sessions stay")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeBound)
	defer cancel()
	ps, closeAll := ownerListers(ctx, backends.Options{})
	defer closeAll()
	rs, err := owner.DestroyOwned(ctx, ps, h.ID())
	for _, r := range rs {
		if r.Err != nil {
			logger.Error("destroying a box of this server", "box", r.Box.Handle.ID, "backend", r.Backend, "err", r.Err)
		}
	}
	if err != nil {
		logger.Error("looking for the boxes of this server", "err", err)
	}
	if n := len(rs); n > 0 {
		fmt.Fprintf(stderr, "harvest: destroyed %d more boxes of this server's (its sessions had left them)\n", n)
	}
}

// ownerListers opens every backend that knows its boxes' owners and that
// works here (a machine without dockerd has no docker boxes to prune).
func ownerListers(ctx context.Context, o backends.Options) ([]owner.Lister, func()) {
	var out []owner.Lister
	var closers []func()
	for _, b := range backends.All {
		p := b.New(o)
		closeP := func() {}
		if c, ok := p.(interface{ Close() error }); ok {
			closeP = func() { c.Close() }
		}
		l, ok := p.(owner.Lister)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		avail := ok && p.Available(actx) == nil
		cancel()
		if !avail {
			closeP()
			continue
		}
		out = append(out, l)
		closers = append(closers, closeP)
	}
	return out, func() {
		for _, c := range closers {
			c()
		}
	}
}

// drainTurns stops the Manager taking new work and waits for its running
// turns to end, for grace at most or until hard.
func drainTurns(mgr *session.Manager, grace time.Duration, hard context.Context, stderr io.Writer, logger *slog.Logger) {
	drained := mgr.Drain()
	fmt.Fprintf(stderr, "harvest: draining: new sessions and messages get 503; running turns have %s to finish\n", grace)
	if mgr.StopsBoxes() {
		fmt.Fprintln(stderr, "harvest: --stop-boxes-on-exit: then the sessions' boxes are destroyed, and idle sessions suspended (their next message resumes them)")
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	start := time.Now()
	select {
	case <-drained:
		logger.Info("drained: no turn runs", "waited", time.Since(start).Round(time.Millisecond))
	case <-t.C:
		logger.Warn("the shutdown grace is over: interrupting the turns still running (the next start marks them interrupted and delivers the queue)", "grace", grace)
	case <-hard.Done():
		logger.Warn("interrupting the running turns (second signal)")
	}
}
