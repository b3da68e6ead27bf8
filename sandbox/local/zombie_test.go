package local_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// TestNoZombies: a box's shim reaps bwrap and the agent before it exits,
// whichever way the box ends (Destroy, Stop, a warm box dropped by Close),
// so nothing is left for the process that would inherit them. Here that
// is this test process, made a child subreaper for the test, standing in
// for `harvest serve` as PID 1 of a container, which reaps no orphan.
func TestNoZombies(t *testing.T) {
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t), PoolSize: 1})
	testreq.Check(t, testreq.Local, p.Available(context.Background()))
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		testreq.Unavailable(t, testreq.Subreaper, "cannot become a child subreaper: %v", err)
	}
	t.Cleanup(func() {
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		// Reap the orphans we inherited (only those: a wait for any child
		// would take the status of a process os/exec waits for).
		for _, z := range orphanZombies(t) {
			unix.Wait4(z.pid, nil, unix.WNOHANG, nil)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func() *sandbox.Sandbox {
		t.Helper()
		sb, err := p.Start(ctx, sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 1000 & exit 0"}}); err != nil || !st.Success() {
			t.Fatal(st, err)
		}
		return sb
	}
	check := func(after string) {
		t.Helper()
		if z := orphanZombies(t); len(z) > 0 {
			t.Errorf("after %s, zombies left to this process: %v", after, z)
			for _, z := range z { // so that the next check sees its own
				unix.Wait4(z.pid, nil, unix.WNOHANG, nil)
			}
		}
	}

	sb := start()
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	check("Destroy")

	sb = start()
	if err := p.Stop(ctx, sb.Handle(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	check("Stop")
	if err := p.Destroy(ctx, sb.Handle()); err != nil {
		t.Fatal(err)
	}
	check("Destroy after Stop")

	sb = start() // and the pool prepares another warm box: Close drops it
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	check("Close")
}

type zombie struct {
	pid  int
	comm string
}

func (z zombie) String() string { return fmt.Sprintf("%d %s", z.pid, z.comm) }

// orphanZombies lists the zombie children of this process. Its own
// children are waited for (os/exec), the box's shim before Destroy, Stop or
// Close returns, so a zombie child seen then is an orphan it inherited,
// which no one will reap.
func orphanZombies(t *testing.T) []zombie {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []zombie
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(s[j+1:])
		if len(f) >= 2 && f[0] == "Z" && f[1] == self {
			out = append(out, zombie{pid: pid, comm: s[i+1 : j]})
		}
	}
	return out
}
