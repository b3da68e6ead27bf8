package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/base/procutil"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// decode reads the docker part of a handle and checks it names a box dir.
func (p *Provider) decode(h sandbox.Handle) (handleData, error) {
	var d handleData
	if h.Backend != Name {
		return d, fmt.Errorf("handle of box %s is for the %s backend, not %s", h.ID, h.Backend, Name)
	}
	if h.ID == "" || h.ID == "." || h.ID == ".." || strings.ContainsAny(h.ID, "/\x00") {
		return d, fmt.Errorf("handle has an invalid box id %q", h.ID)
	}
	if len(h.Data) > 0 {
		if err := json.Unmarshal(h.Data, &d); err != nil {
			return d, fmt.Errorf("handle of box %s: %w", h.ID, err)
		}
	}
	if d.ContainerID == "" {
		d.ContainerID = containerName(h.ID)
	}
	if d.RunDir == "" {
		d.RunDir = filepath.Join(p.cfg.RunDir, h.ID)
	}
	if !filepath.IsAbs(d.RunDir) || filepath.Clean(d.RunDir) != d.RunDir || filepath.Base(d.RunDir) != h.ID {
		return d, fmt.Errorf("handle of box %s: run dir %q is not a box's run dir", h.ID, d.RunDir)
	}
	if d.Pool != "" && !warmName(d.Pool) {
		return d, fmt.Errorf("handle of box %s: %q is not a warm box's name", h.ID, d.Pool)
	}
	return d, nil
}

// inspect returns the box's container, or an error wrapping
// sandbox.ErrNotFound when there is none. A container that is not this box's
// (its label says otherwise) is refused.
func (p *Provider) inspect(ctx context.Context, cli *client.Client, h sandbox.Handle, d handleData) (container.InspectResponse, error) {
	res, err := cli.ContainerInspect(ctx, d.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return res.Container, fmt.Errorf("box %s: container %.12s is gone: %w", h.ID, d.ContainerID, sandbox.ErrNotFound)
		}
		if client.IsErrConnectionFailed(err) {
			return res.Container, p.unreachable(err)
		}
		return res.Container, fmt.Errorf("box %s: inspecting container %.12s: %w", h.ID, d.ContainerID, err)
	}
	c := res.Container
	if c.Config == nil || !isBox(c, h.ID, d.Pool) {
		return c, fmt.Errorf("box %s: container %.12s is not this box's (label %s=%q); refusing to touch it",
			h.ID, d.ContainerID, LabelBox, labelOf(c, LabelBox))
	}
	return c, nil
}

// isBox reports whether container c is box id: labelled so, or made warm
// as pool (its label) and named for the box since its claim.
func isBox(c container.InspectResponse, id, pool string) bool {
	l := c.Config.Labels
	if l[LabelManaged] != "true" {
		return false
	}
	if l[LabelBox] == id {
		return true
	}
	return pool != "" && l[LabelPool] != "" && l[LabelBox] == pool && c.Name == "/"+containerName(id)
}

func labelOf(c container.InspectResponse, k string) string {
	if c.Config == nil {
		return ""
	}
	return c.Config.Labels[k]
}

// Recover implements sandbox.Provider.
func (p *Provider) Recover(ctx context.Context, h sandbox.Handle) (*sandbox.Sandbox, error) {
	p.warmPool() // a restarted server's boxes come back before new ones
	d, err := p.decode(h)
	if err != nil {
		return nil, err
	}
	cli, err := p.client()
	if err != nil {
		return nil, err
	}
	c, err := p.inspect(ctx, cli, h, d)
	if err != nil {
		return nil, err
	}
	st := c.State
	if st == nil || !st.Running || st.Pid <= 0 {
		return nil, fmt.Errorf("box %s: %s: %w", h.ID, describeState(st), sandbox.ErrNotFound)
	}
	if st.Paused {
		return nil, fmt.Errorf("box %s: %s", h.ID, describeState(st))
	}
	d.ContainerID = c.ID
	sb, err := p.connect(ctx, cli, h, d, st.Pid, false)
	if err != nil && agentEnded(ctx, st.Pid) {
		// It was exiting (its time limit, a Shutdown) while dockerd still
		// reported the container running. A refused peer counts too: under
		// gVisor the socket's peer is the gofer, recognised by its
		// sibling, the sentry (st.Pid), which was going; the box is gone
		// either way and nothing was sent.
		return nil, fmt.Errorf("box %s: its agent has exited: %w", h.ID, sandbox.ErrNotFound)
	}
	return sb, err
}

// exitWait bounds how long Recover waits for an agent that cannot be reached
// to finish exiting.
const exitWait = 2 * time.Second

// agentEnded reports whether the agent (host pid) is gone or goes within
// exitWait.
func agentEnded(ctx context.Context, pid int) bool {
	id, err := procutil.Lookup(pid)
	if err != nil {
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, exitWait)
	defer cancel()
	return id.WaitGone(wctx) == nil
}

// Stop implements sandbox.Provider: `docker stop` with grace (rounded up to a
// second) as the timeout. dockerd sends SIGTERM to the agent, which SIGTERMs
// every process in the box; dockerd SIGKILLs the box when the grace is over.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle, grace time.Duration) error {
	d, err := p.decode(h)
	if err != nil {
		return err
	}
	cli, err := p.client()
	if err != nil {
		return err
	}
	c, err := p.inspect(ctx, cli, h, d)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	secs := int(math.Ceil(max(grace, 0).Seconds()))
	if _, err := cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stopping box %s: %w", h.ID, err)
	}
	return nil
}

// Destroy implements sandbox.Provider: force-remove the container (killing
// everything in it) and remove the run dir. A box already gone is not an
// error.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	d, err := p.decode(h)
	if err != nil {
		return err
	}
	cli, err := p.client()
	if err != nil {
		return err
	}
	c, err := p.inspect(ctx, cli, h, d)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
	case err != nil:
		return fmt.Errorf("destroying box %s: %w", h.ID, err)
	default:
		if err := removeContainer(ctx, cli, c.ID); err != nil {
			return fmt.Errorf("destroying box %s: removing container %.12s: %w", h.ID, c.ID, err)
		}
	}
	if d.Pool != "" {
		// A box made warm: its slot (unmounted first), and its run dir
		// under the warm name if a claim did not get to rename it.
		if err := releaseSlot(p.slotPath(d.Pool)); err != nil {
			return fmt.Errorf("destroying box %s: %w", h.ID, err)
		}
		if err := os.RemoveAll(filepath.Join(p.cfg.RunDir, d.Pool)); err != nil {
			return fmt.Errorf("destroying box %s: %w", h.ID, err)
		}
	}
	if err := os.RemoveAll(d.RunDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("destroying box %s: removing %s: %w", h.ID, d.RunDir, err)
	}
	return nil
}

// List implements sandbox.Lister: every container (running or not) labelled
// as a box of this provider's RunDir. Handles come from the box's handle.json
// when it is there and matches the container, else are rebuilt from the
// container's labels (enough to Destroy it).
func (p *Provider) List(ctx context.Context) ([]sandbox.Handle, error) {
	bs, err := p.ListOwned(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Handle, 0, len(bs))
	for _, b := range bs {
		if !b.Warm {
			out = append(out, b.Handle)
		}
	}
	return out, nil
}

var _ owner.Lister = (*Provider)(nil)

// ListOwned implements owner.Lister: List's boxes with the owner each
// container is labelled with (LabelOwner; "" on a container made before
// owners were recorded).
func (p *Provider) ListOwned(ctx context.Context) ([]owner.Box, error) {
	cli, err := p.client()
	if err != nil {
		return nil, err
	}
	f := make(client.Filters).Add("label", LabelManaged+"=true", LabelRunDir+"="+p.cfg.RunDir)
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		if client.IsErrConnectionFailed(err) {
			return nil, p.unreachable(err)
		}
		return nil, fmt.Errorf("listing docker boxes: %w", err)
	}
	var out []owner.Box
	for _, c := range res.Items {
		id := c.Labels[LabelBox]
		if !validID(id) {
			continue
		}
		own := c.Labels[LabelOwner]
		if owner.CheckID(own) != nil {
			own = ""
		}
		var pool string
		warm := false
		if c.Labels[LabelPool] != "" {
			// Made warm: unclaimed while its name is the warm one's,
			// else the box its name says, owned as its run dir records.
			if !warmName(id) || len(c.Names) == 0 {
				continue
			}
			pool = id
			name := strings.TrimPrefix(c.Names[0], "/")
			if name == containerName(pool) {
				warm = true
			} else if id = strings.TrimPrefix(name, "harvest-"); !validID(id) || id == name {
				continue
			} else if o := owner.Recorded(filepath.Join(p.cfg.RunDir, id)); o != "" {
				own = o
			}
		}
		boxDir := filepath.Join(p.cfg.RunDir, id)
		if h, ok := readHandle(boxDir, id, c.ID); ok {
			out = append(out, owner.Box{Handle: h, Owner: own})
			continue
		}
		data, _ := json.Marshal(handleData{ContainerID: c.ID, RunDir: boxDir, Pool: pool})
		h := sandbox.Handle{ID: id, Backend: Name, Created: time.Unix(c.Created, 0), Spec: sandbox.Spec{ID: id, Image: c.Image}, Data: data}
		if t, err := time.Parse(time.RFC3339Nano, c.Labels[LabelCreated]); err == nil {
			h.Created = t
		}
		if t, err := time.Parse(time.RFC3339, c.Labels[LabelDeadline]); err == nil {
			h.Deadline = t
		}
		out = append(out, owner.Box{Handle: h, Owner: own, Warm: warm})
	}
	return out, nil
}

func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

// readHandle reads boxDir/handle.json if it is the handle of box id in
// container containerID.
func readHandle(boxDir, id, containerID string) (sandbox.Handle, bool) {
	var h sandbox.Handle
	b, err := os.ReadFile(filepath.Join(boxDir, "handle.json"))
	if err != nil || json.Unmarshal(b, &h) != nil || h.ID != id || h.Backend != Name {
		return h, false
	}
	var d handleData
	if json.Unmarshal(h.Data, &d) != nil || d.ContainerID != containerID || d.RunDir != boxDir {
		return h, false
	}
	return h, true
}
