package agentd

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper is the only thing in the agent that waits for children. See the
// package doc ("Processes and the reaper") for why forking happens under mu.
//
// As a box's PID 1 it waits in a blocking wait4(-1) while the box has any
// process: one OS thread, and only while there is something to wait for. A
// SIGCHLD through os/signal would cost three for good (os/signal's loop
// parked in the runtime's signal_recv, the thread that keeps the signal
// masks and the runtime's template thread), in every idle box: pid_max
// bounds a node's kernel tasks. The wait4 cannot be interrupted, so Close
// waits for it only once the box has no process left (Main ends them
// first; as PID 1 nothing survives the agent anyway). An agent that is not
// PID 1 (tests, `--listen` outside a box) may share its process with other
// children it must not wait for forever: it reaps on SIGCHLD instead.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]func(syscall.WaitStatus)
	// forked wakes the PID 1 reaper when a child may exist again after
	// wait4 said there was none.
	forked chan struct{}
	sigs   chan os.Signal // not PID 1: SIGCHLD
}

func newReaper(pid1 bool) *reaper {
	r := &reaper{
		waiters: map[int]func(syscall.WaitStatus){},
		forked:  make(chan struct{}, 1),
	}
	if !pid1 {
		r.sigs = make(chan os.Signal, 1)
		signal.Notify(r.sigs, syscall.SIGCHLD)
	}
	return r
}

// fork runs start (which must fork a child and return its pid) under the lock
// and registers onExit for that pid before the reaper can collect it.
// onExit runs on the reaper goroutine and must not block.
func (r *reaper) fork(start func() (int, error), onExit func(syscall.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = onExit
	select {
	case r.forked <- struct{}{}:
	default:
	}
	return pid, nil
}

func (r *reaper) run(ctx context.Context) {
	if r.sigs == nil {
		r.runPID1(ctx)
		return
	}
	defer signal.Stop(r.sigs)
	r.reap(syscall.WNOHANG) // children that exited before we listened
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.sigs:
			r.reap(syscall.WNOHANG)
		}
	}
}

// runPID1 waits in wait4 until the box has no child left (orphans included:
// they are ours), then until the next fork.
func (r *reaper) runPID1(ctx context.Context) {
	for {
		r.reap(0)
		select {
		case <-ctx.Done():
			return
		case <-r.forked:
		}
	}
}

// reap collects exited children, known or orphaned, until there is none
// left to collect: with WNOHANG none that has exited, without it none at
// all (ECHILD).
func (r *reaper) reap(options int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, options, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		// The lock: a fork registers its pid before releasing it.
		r.mu.Lock()
		if f, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			f(ws)
		}
		r.mu.Unlock()
	}
}
