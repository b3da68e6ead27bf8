package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/base/unixsock"
	"github.com/harvest-dev/harvest/sandbox"
)

// agentStartTimeout bounds how long Start waits for a started container's
// agent to listen (it takes milliseconds).
const agentStartTimeout = 30 * time.Second

func sockPath(boxDir string) string { return filepath.Join(boxDir, "run", sockName) }

// connect dials the box's agent, checks the peer is pid (the container's PID
// 1 in our pid namespace) and performs the handshake. With wait, it retries
// while the agent is not listening yet and the container still runs.
func (p *Provider) connect(ctx context.Context, cli *client.Client, h sandbox.Handle, d handleData, pid int, wait bool) (*sandbox.Sandbox, error) {
	sock := sockPath(d.RunDir)
	var conn *net.UnixConn
	var err error
	if wait {
		conn, err = p.waitDial(ctx, cli, d.ContainerID, sock)
	} else {
		conn, err = unixsock.Dial(ctx, sock)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent of box %s: %w", h.ID, err)
	}
	peer, err := unixsock.PeerPID(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connecting to the agent of box %s: reading the socket's peer: %w", h.ID, err)
	}
	if peer != pid && !gVisorGofer(peer, pid) {
		conn.Close()
		return nil, &peerError{box: h.ID, sock: sock, peer: peer, want: pid}
	}
	return sandbox.Connect(ctx, p, h, conn)
}

// gVisorGofer reports whether peer is the gofer of the gVisor sandbox pid
// (the container's process under runsc, the sentry): runsc's gofer is
// the host process that binds every host socket the box creates
// (--host-uds=create), its sibling under the same containerd shim. Under
// gVisor the check thus proves the socket is this box's, not which of its
// processes serves it: one that replaced its agent would gain nothing the
// box has not already, and the boundary is the sentry's.
func gVisorGofer(peer, pid int) bool {
	// runsc re-executes itself (comm "exe") with argv[0] naming the part.
	argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", peer))
	if err != nil || !bytes.HasPrefix(argv, []byte("runsc-gofer\x00")) {
		return false
	}
	pp, err1 := parentPID(peer)
	sp, err2 := parentPID(pid)
	return err1 == nil && err2 == nil && pp == sp && pp > 1
}

// parentPID reads a process's parent from /proc/PID/stat.
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.Atoi(f[1])
}

// peerError: the box's socket is served by a process other than its agent.
type peerError struct {
	box, sock  string
	peer, want int
}

func (e *peerError) Error() string {
	return fmt.Sprintf("refusing to talk to box %s: the socket %s was created by pid %d, not by the box's agent (pid %d): "+
		"a process in the box replaced %s/%s (or harvest does not run in dockerd's pid namespace); destroy the box",
		e.box, e.sock, e.peer, e.want, runMount, sockName)
}

// waitDial dials sock until the agent listens, the container exits, or
// agentStartTimeout passes.
func (p *Provider) waitDial(ctx context.Context, cli *client.Client, containerID, sock string) (*net.UnixConn, error) {
	wctx, cancel := context.WithTimeout(ctx, agentStartTimeout)
	defer cancel()
	// failed is the error to end with after err: the end of ctx or of the
	// wait itself, when that is the cause, says more.
	failed := func(err error) error {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return fmt.Errorf("the agent did not listen on %s within %s", sock, agentStartTimeout)
		}
		return err
	}
	delay := 500 * time.Microsecond
	for {
		conn, err := unixsock.Dial(wctx, sock)
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, failed(err)
		}
		if delay >= 8*time.Millisecond {
			if _, err := p.runningPID(wctx, cli, containerID); err != nil {
				return nil, failed(err)
			}
		}
		if !sleep(wctx, delay) {
			return nil, failed(nil)
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// sleep waits d, or until ctx ends (then it returns false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runningPID returns the host pid of a running container's PID 1, or an
// error saying how the container ended (with the agent's last output).
func (p *Provider) runningPID(ctx context.Context, cli *client.Client, containerID string) (int, error) {
	res, err := cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		return 0, fmt.Errorf("inspecting container %.12s: %w", containerID, err)
	}
	st := res.Container.State
	if st != nil && st.Running && !st.Paused && st.Pid > 0 {
		return st.Pid, nil
	}
	return 0, fmt.Errorf("the agent is not running: %s%s", describeState(st), p.agentOutput(ctx, cli, containerID))
}

// describeState says how a container that does not run ended.
func describeState(st *container.State) string {
	if st == nil {
		return "container state unknown"
	}
	if st.Paused {
		return "the container is paused (docker unpause it)"
	}
	s := fmt.Sprintf("the container is %s", st.Status)
	if st.Status == container.StateExited || st.Status == container.StateDead {
		s += fmt.Sprintf(" (exit code %d)", st.ExitCode)
	}
	if st.OOMKilled {
		s += " (out of memory)"
	}
	if st.Error != "" {
		s += ": " + st.Error
	}
	return s
}

// agentOutput is the end of the container's log (the agent's stderr), as
// "; its output: ...", or "".
func (p *Provider) agentOutput(ctx context.Context, cli *client.Client, containerID string) string {
	rc, err := cli.ContainerLogs(ctx, containerID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10))
	s := strings.TrimSpace(out.String())
	if s == "" {
		return ""
	}
	return "; its output: " + s
}

// removeContainer force-removes a container and its anonymous volumes. A
// container that is already gone is not an error; one being removed by
// someone else is waited for.
func removeContainer(ctx context.Context, cli *client.Client, id string) error {
	_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "already in progress") {
		return err
	}
	delay := time.Millisecond
	for {
		_, ierr := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(ierr) {
			return nil
		}
		if !sleep(ctx, delay) {
			return fmt.Errorf("waiting for dockerd to remove container %.12s: %w", id, ctx.Err())
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}
