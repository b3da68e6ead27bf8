package docker_test

import (
	"os"
	"testing"

	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// TestOwners: a box's container is labelled with its owner (the
// Config.Owner a server holds, else the provider's instance); owner.Prune
// removes the container of an owner nobody holds (a one-shot command's
// kept box once it exited), never that of an owner that runs.
func TestOwners(t *testing.T) {
	_, cfg := newProvider(t)
	ctx := testCtx(t)
	ownersDir := owner.DirFor(cfg.RunDir, docker.Name) // the providers' default
	server, err := owner.Share(ctx, ownersDir, "serve-00000000000000bb", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Release()
	scfg := cfg
	scfg.Owner = server.ID()
	// Closed after the boxes' cleanups (which may use them again).
	served := docker.New(scfg)
	t.Cleanup(func() { served.Close() })
	oneShot := docker.New(cfg)
	t.Cleanup(func() { oneShot.Close() })
	a := start(t, ctx, served, sandbox.Spec{})
	b := start(t, ctx, oneShot, sandbox.Spec{})
	cli := dockerClient(t)
	labels := map[string]string{}
	for _, sb := range []*sandbox.Sandbox{a, b} {
		c, err := cli.ContainerInspect(ctx, "harvest-"+sb.ID(), client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		labels[sb.ID()] = c.Container.Config.Labels[docker.LabelOwner]
	}
	if labels[a.ID()] != server.ID() {
		t.Errorf("the server's box is labelled %q, want %q", labels[a.ID()], server.ID())
	}
	if l := labels[b.ID()]; l == "" || l == server.ID() {
		t.Errorf("the one-shot box is labelled %q, want its provider's instance", l)
	}
	oneShot.Close() // the command exited, its box kept
	lister := docker.New(cfg)
	t.Cleanup(func() { lister.Close() })
	rs, err := owner.Prune(ctx, ownersDir, []owner.Lister{lister}, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]owner.Action{}
	for _, r := range rs {
		got[r.Box.Handle.ID] = r.Action
	}
	if got[a.ID()] != owner.Owned || got[b.ID()] != owner.Destroyed || len(got) != 2 {
		t.Fatalf("prune: %v, want %s kept (its server runs) and %s destroyed", got, a.ID(), b.ID())
	}
	if _, err := cli.ContainerInspect(ctx, "harvest-"+b.ID(), client.ContainerInspectOptions{}); err == nil {
		t.Errorf("the pruned box's container is still there")
	}
	if !a.Alive() {
		t.Error("the running server's box died in the prune")
	}
}

// isOwnersDir: the provider's owners' directory (package owner), which a
// provider whose run dir is not named for its backend keeps in it (it
// outlives any one box).
func isOwnersDir(e os.DirEntry) bool { return e.Name() == ".owners" }
