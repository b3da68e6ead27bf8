package sandbox

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Sandbox is a connected box. All methods are safe for concurrent use. Close
// drops the connection and leaves the box running; Destroy ends it.
type Sandbox struct {
	handle   Handle
	provider Provider
	c        *client
	hello    proto.HelloReply
	// obs, when set (Observe), hears of every command started.
	obs Observer
}

// Connect performs the hello handshake on nc (a fresh connection to the box's
// agent) and returns the Sandbox. Backends call it from Start and Recover.
func Connect(ctx context.Context, p Provider, h Handle, nc net.Conn) (*Sandbox, error) {
	return connect(ctx, p, h, nc, nil)
}

// ConnectClaim is Connect for an agent started warm: the hello gives it the
// box's identity (id, environment, workdir, deadline) from h.
func ConnectClaim(ctx context.Context, p Provider, h Handle, nc net.Conn) (*Sandbox, error) {
	claim := &proto.Claim{BoxID: h.ID, Env: EnvList(h.Spec.Env), Workdir: h.Spec.Workdir, Pids: h.Spec.Limits.Pids}
	if !h.Deadline.IsZero() {
		claim.DeadlineMS = h.Deadline.UnixMilli()
	}
	return connect(ctx, p, h, nc, claim)
}

func connect(ctx context.Context, p Provider, h Handle, nc net.Conn, claim *proto.Claim) (*Sandbox, error) {
	c := newClient(nc)
	sb := &Sandbox{handle: h, provider: p, c: c}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	_, err := c.call(ctx, proto.MethodHello, proto.Hello{Version: proto.Version, BoxID: h.ID, Claim: claim}, nil, &sb.hello)
	_ = nc.SetDeadline(time.Time{})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("handshake with the agent of box %s: %w", h.ID, err)
	}
	return sb, nil
}

// SetHandle replaces the box's handle. Backends call it before returning a
// Sandbox whose handle they completed after the handshake; never afterwards.
func (sb *Sandbox) SetHandle(h Handle) { sb.handle = h }

// ID is the box's id.
func (sb *Sandbox) ID() string { return sb.handle.ID }

// Handle is what to persist to Recover or Destroy this box later.
func (sb *Sandbox) Handle() Handle { return sb.handle }

// Backend is the name of the backend running the box.
func (sb *Sandbox) Backend() string { return sb.handle.Backend }

// Unsafe reports a box without isolation (the host backend).
func (sb *Sandbox) Unsafe() bool { return sb.handle.Unsafe }

// Workdir is the default working directory inside the box.
func (sb *Sandbox) Workdir() string { return sb.hello.Workdir }

// AgentPID is the in-box agent's pid as the box sees it (1 in an isolated box).
func (sb *Sandbox) AgentPID() int { return sb.hello.PID }

// WorkspacePath is where workspace name is inside the box: /workspace/{name},
// or the host directory itself on the host backend.
func (sb *Sandbox) WorkspacePath(name string) string {
	for _, w := range sb.handle.Spec.Workspaces {
		if w.Name == name {
			if sb.handle.Unsafe {
				return w.HostPath
			}
			return w.Path()
		}
	}
	return ""
}

// Alive reports whether the connection to the agent is up.
func (sb *Sandbox) Alive() bool { return sb.c.alive() }

// Close closes the connection. The box keeps running; Recover reconnects.
func (sb *Sandbox) Close() error { return sb.c.close() }

// Stop ends every process in the box (SIGTERM, then SIGKILL after grace).
func (sb *Sandbox) Stop(ctx context.Context, grace time.Duration) error {
	return sb.provider.Stop(ctx, sb.handle, grace)
}

// Destroy closes the connection and destroys the box. Idempotent.
func (sb *Sandbox) Destroy(ctx context.Context) error {
	sb.c.close()
	return sb.provider.Destroy(ctx, sb.handle)
}

// Shutdown asks the agent to end the box: SIGTERM every process, wait up to
// grace, SIGKILL the rest, and exit. The connection closes when it has.
func (sb *Sandbox) Shutdown(ctx context.Context, grace time.Duration) error {
	_, err := sb.c.call(ctx, proto.MethodShutdown, proto.ShutdownParams{GraceMS: grace.Milliseconds()}, nil, nil)
	return err
}

// Fence arms the box's fence (its dead-man's switch: package agentd's
// "Fence"), or moves it on: unless a later call moves it again, the agent
// ends the box at deadline (this process's clock), every process killed,
// whatever happens to this process meanwhile (paused, killed, cut off).
// The deadline only moves later; a zero deadline disarms the fence. It
// returns how long the box has left by the agent's clock (-1: disarmed).
// Only the host may call it: the agent refuses a connection from a
// process in the box.
func (sb *Sandbox) Fence(ctx context.Context, deadline time.Time) (time.Duration, error) {
	p := proto.FenceParams{Off: deadline.IsZero()}
	if !p.Off {
		now := time.Now()
		p.SentNS, p.LeftNS = now.Sub(hostClock).Nanoseconds(), deadline.Sub(now).Nanoseconds()
	}
	var r proto.FenceReply
	if _, err := sb.c.call(ctx, proto.MethodFence, p, nil, &r); err != nil {
		return 0, fmt.Errorf("fencing box %s: %w", sb.handle.ID, err)
	}
	if r.LeftMS < 0 {
		return -1, nil
	}
	return time.Duration(r.LeftMS) * time.Millisecond, nil
}

// hostClock is the origin of the monotonic clock Fence sends.
var hostClock = time.Now()

// AgentInfo reports the in-box agent's resource use.
type AgentInfo = proto.InfoReply

// Info reports the in-box agent's own resource use (RSS, threads).
func (sb *Sandbox) Info(ctx context.Context) (AgentInfo, error) {
	var r proto.InfoReply
	_, err := sb.c.call(ctx, proto.MethodInfo, proto.InfoParams{}, nil, &r)
	return r, err
}

// Footprint is Info after the agent has collected garbage and returned the
// freed memory to the kernel: RSSBytes then says what the agent holds now,
// not the peak an earlier burst left mapped. It costs the agent a full
// collection (about a millisecond for its small heap), so health checks use
// Info and leak checks use Footprint.
func (sb *Sandbox) Footprint(ctx context.Context) (AgentInfo, error) {
	var r proto.InfoReply
	_, err := sb.c.call(ctx, proto.MethodInfo, proto.InfoParams{Collect: true}, nil, &r)
	return r, err
}

// ProcInfo describes a process the agent started.
type ProcInfo = proto.ProcInfo

// Ps lists the processes the agent started and still remembers (running, and
// the most recent finished ones).
func (sb *Sandbox) Ps(ctx context.Context) ([]ProcInfo, error) {
	var r proto.PsReply
	_, err := sb.c.call(ctx, proto.MethodPs, struct{}{}, nil, &r)
	return r.Procs, err
}
