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
type reaper struct {
	mu      sync.Mutex
	waiters map[int]func(syscall.WaitStatus)
	sigs    chan os.Signal
}

func newReaper() *reaper {
	r := &reaper{
		waiters: map[int]func(syscall.WaitStatus){},
		sigs:    make(chan os.Signal, 1),
	}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	return r
}

// fork runs start (which must fork a child and return its pid) under the lock
// and registers onExit for that pid before any SIGCHLD can be handled.
// onExit runs on the reaper goroutine and must not block.
func (r *reaper) fork(start func() (int, error), onExit func(syscall.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = onExit
	return pid, nil
}

func (r *reaper) run(ctx context.Context) {
	defer signal.Stop(r.sigs)
	r.reap() // children that exited before we listened
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.sigs:
			r.reap()
		}
	}
}

// reap collects every exited child, known or orphaned.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if f, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			f(ws)
		}
	}
}
