package procutil_test

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/base/procutil"
	"github.com/harvest-dev/harvest/internal/testbin"
)

// inWaitid counts this process's threads blocked in waitid (syscall 247 on
// amd64, 95 on arm64).
func inWaitid(t *testing.T) int {
	t.Helper()
	nr := "247"
	if runtime.GOARCH == "arm64" {
		nr = "95"
	}
	ts, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ts {
		b, _ := os.ReadFile("/proc/self/task/" + e.Name() + "/syscall")
		if f := strings.Fields(string(b)); len(f) > 0 && f[0] == nr {
			n++
		}
	}
	return n
}

// parked counts goroutines waiting on the netpoller for a child's exit.
func parked() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "procutil.waitExited") {
			n++
		}
	}
	return n
}

// TestReaperHoldsNoThread: children waited for by StartReaper hold no OS
// thread each while they run (the reaper waits on the netpoller, not in
// waitid), and each is reaped once it exits, also one that exited before
// the reaper looked.
func TestReaperHoldsNoThread(t *testing.T) {
	const n = 40
	var cmds []*exec.Cmd
	var reaped []<-chan struct{}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
		}
	}()
	for range n {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		reaped = append(reaped, procutil.StartReaper(c))
	}
	testbin.WaitFor(t, 30*time.Second, "every reaper to wait on the netpoller", func() bool { return parked() == n })
	if got := inWaitid(t); got != 0 {
		t.Errorf("%d threads blocked in waitid with %d children waited for", got, n)
	}
	for i, c := range cmds {
		if err := c.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-reaped[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("child %d killed and not reaped in 30 s", i)
		}
		if c.ProcessState == nil || c.ProcessState.Exited() {
			t.Errorf("child %d: %v, want killed", i, c.ProcessState)
		}
	}
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 30*time.Second, "true to exit (a zombie)", func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/stat")
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		return i > 0 && strings.HasPrefix(s[i+1:], " Z")
	})
	select {
	case <-procutil.StartReaper(c):
	case <-time.After(30 * time.Second):
		t.Fatal("an exited child was not reaped")
	}
}
