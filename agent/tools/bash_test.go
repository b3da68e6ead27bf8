package tools

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// procsMatching lists the box's processes whose command line contains s
// (ps, inside the box).
func (b *testBox) procsMatching(t *testing.T, s string) string {
	t.Helper()
	out := b.sh(t, "ps -eo pid,args")
	var hits []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) && !strings.Contains(l, "ps -eo") {
			hits = append(hits, l)
		}
	}
	return strings.Join(hits, "\n")
}

func TestBash(t *testing.T) {
	b := newBox(t, Config{})
	t.Run("output and exit code", func(t *testing.T) {
		r := b.call(t, "bash", `{"command": "echo out; echo err >&2; pwd", "description": "print things"}`)
		wantOK(t, r, "out\n", "err\n", ws+"\n", "[exit code 0]")
		if r.ExitCode == nil || *r.ExitCode != 0 {
			t.Errorf("exit code %v", r.ExitCode)
		}
	})
	t.Run("failure", func(t *testing.T) {
		r := b.call(t, "bash", `{"command": "echo partial; exit 3"}`)
		wantErr(t, r, "partial\n[exit code 3]")
		if r.ExitCode == nil || *r.ExitCode != 3 {
			t.Errorf("exit code %v", r.ExitCode)
		}
		wantErr(t, b.call(t, "bash", `{"command": "no-such-command-here"}`), "not found", "[exit code 127]")
	})
	t.Run("bash, fresh each call, in workdir", func(t *testing.T) {
		b.sh(t, "mkdir -p sub")
		wantOK(t, b.call(t, "bash", `{"command": "[[ -n $BASH_VERSION ]] && cd sub && pwd"}`), ws+"/sub\n")
		wantOK(t, b.call(t, "bash", `{"command": "pwd"}`), ws+"\n")
		wantOK(t, b.call(t, "bash", `{"command": "pwd", "workdir": "sub"}`), ws+"/sub\n")
		wantErr(t, b.call(t, "bash", `{"command": "pwd", "workdir": "nope"}`), "does not exist")
		wantOK(t, b.call(t, "bash", `{"command": "echo $GIT_TERMINAL_PROMPT; cat"}`), "0\n[exit code 0]")
	})
	t.Run("no output", func(t *testing.T) {
		wantOK(t, b.call(t, "bash", `{"command": "true"}`), "(no output)\n[exit code 0]")
	})
	t.Run("timeout over the maximum", func(t *testing.T) {
		wantErr(t, b.call(t, "bash", `{"command": "true", "timeout": 600001}`), "over the maximum of 600000 ms", "run_in_background")
	})
}

func TestBashTruncationKeepsHeadAndTail(t *testing.T) {
	b := newBox(t, Config{})
	r := b.call(t, "bash", `{"command": "seq 1 100000"}`)
	wantOK(t, r, "1\n2\n3\n", "99999\n100000\n[exit code 0]", "bytes of output cut here")
	if !r.Truncated {
		t.Error("not marked truncated")
	}
	var all strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&all, "%d\n", i)
	}
	total := all.Len()
	var cut, inAll int
	if _, err := fmt.Sscanf(r.Output[strings.Index(r.Output, "[... "):], "[... %d bytes of output cut here; %d bytes in all", &cut, &inAll); err != nil {
		t.Fatal(err)
	}
	if inAll != total {
		t.Errorf("says %d bytes in all, seq wrote %d", inAll, total)
	}
	// What is shown plus what was cut is everything, and the cuts fall on
	// line boundaries.
	i := strings.Index(r.Output, "\n\n[... ")
	head := r.Output[:i]
	j := strings.Index(r.Output, "...]\n\n") + len("...]\n\n")
	tail := strings.TrimSuffix(r.Output[j:], "[exit code 0]")
	if len(head)+len(tail)+cut != total {
		t.Errorf("head %d + tail %d + cut %d != %d", len(head), len(tail), cut, total)
	}
	if !strings.HasPrefix(all.String(), head) || !strings.HasSuffix(all.String(), tail) || !strings.HasSuffix(head, "\n") {
		t.Error("head or tail is not the real beginning or end of the output")
	}
	if len(r.Output) > DefaultMaxOutputBytes+200 {
		t.Errorf("output is %d bytes", len(r.Output))
	}
}

func TestBashTimeoutKillsTree(t *testing.T) {
	b := newBox(t, Config{})
	start := time.Now()
	r := b.call(t, "bash", `{"command": "sleep 3141 & sleep 2718; echo never", "timeout": 300}`)
	wantErr(t, r, "timed out after 300ms", "every process it started were killed")
	if strings.Contains(r.Output, "never") {
		t.Error("the command ran to its end")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if left := b.procsMatching(t, "sleep"); left != "" {
		t.Errorf("processes left after the timeout:\n%s", left)
	}
}

func TestBashCancel(t *testing.T) {
	b := newBox(t, Config{})
	b.sh(t, "mkfifo /tmp/started")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result, 1)
	go func() {
		done <- b.callCtx(ctx, t, "bash", `{"command": "echo up > /tmp/started; sleep 3141"}`)
	}()
	// Opening the fifo for reading blocks until the command has opened it
	// for writing: then it is running.
	if got := b.sh(t, "cat /tmp/started"); got != "up\n" {
		t.Fatalf("got %q", got)
	}
	start := time.Now()
	cancel()
	var r Result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("bash did not return after cancellation")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("bash returned %v after the cancellation; want under a second", d)
	}
	wantErr(t, r, "cancelled")
	if left := b.procsMatching(t, "sleep 3141"); left != "" {
		t.Errorf("the command survived the cancellation:\n%s", left)
	}
}

func TestBashBackground(t *testing.T) {
	b := newBox(t, Config{})
	b.sh(t, "mkfifo /tmp/go")
	r := b.call(t, "bash", `{"command": "echo ready; read line < /tmp/go; echo got $line; exit 4", "run_in_background": true}`)
	wantOK(t, r, "Started bash_1 in the background")
	if r.BackgroundID != "bash_1" {
		t.Fatalf("id %q", r.BackgroundID)
	}
	// Wait for its first line.
	var out strings.Builder
	for !strings.Contains(out.String(), "ready") {
		r = b.call(t, "bash_output", `{"id": "bash_1", "wait": 10000}`)
		wantOK(t, r, "bash_1 is running")
		out.WriteString(r.Output)
	}
	// Another call in between: the process lives on.
	wantOK(t, b.call(t, "bash", `{"command": "echo hello > /tmp/go"}`))
	out.Reset()
	for !strings.Contains(out.String(), "has finished") {
		r = b.call(t, "bash_output", `{"id": "bash_1", "wait": 10000}`)
		out.WriteString(r.Output)
	}
	if !strings.Contains(out.String(), "got hello\n") || !strings.Contains(out.String(), "exit code 4") {
		t.Errorf("output:\n%s", out.String())
	}
	if r.ExitCode == nil || *r.ExitCode != 4 {
		t.Errorf("exit code %v", r.ExitCode)
	}
	// Read output is not repeated.
	wantOK(t, b.call(t, "bash_output", `{"id": "bash_1"}`), "(no new output;")
	wantErr(t, b.call(t, "bash_output", `{"id": "bash_9"}`), `no background process "bash_9"`, "known ids: bash_1")
}

func TestBashBackgroundFilterAndKill(t *testing.T) {
	b := newBox(t, Config{})
	r := b.call(t, "bash", `{"command": "for i in 1 2 3 4; do echo line$i; done; echo E''RROR boom; sleep 3141", "run_in_background": true}`)
	wantOK(t, r)
	id := r.BackgroundID
	var got strings.Builder
	for !strings.Contains(got.String(), "ERROR") {
		r = b.call(t, "bash_output", map[string]any{"id": id, "filter": "ERROR|line4", "wait": 10000})
		wantOK(t, r)
		got.WriteString(r.Output)
	}
	if strings.Contains(got.String(), "line1") {
		t.Errorf("the filter let through other lines:\n%s", got.String())
	}
	if !strings.Contains(got.String(), "line4") {
		t.Errorf("line4 is missing:\n%s", got.String())
	}
	if b.procsMatching(t, "sleep 3141") == "" {
		t.Fatal("the background process is not running")
	}
	if list := b.env.Background(); len(list) != 1 || !list[0].Running || list[0].ID != id {
		t.Errorf("Background() = %+v", list)
	}
	wantOK(t, b.call(t, "bash_kill", map[string]any{"id": id}), "Killed "+id)
	if left := b.procsMatching(t, "sleep 3141"); left != "" {
		t.Errorf("left after bash_kill:\n%s", left)
	}
	wantErr(t, b.call(t, "bash_output", map[string]any{"id": id}), "no background process")
}

func TestBashBackgroundLimitAndClose(t *testing.T) {
	b := newBox(t, Config{Limits: Limits{MaxBackground: 2}})
	for i := 0; i < 2; i++ {
		wantOK(t, b.call(t, "bash", `{"command": "sleep 3141", "run_in_background": true}`))
	}
	wantErr(t, b.call(t, "bash", `{"command": "sleep 3141", "run_in_background": true}`), "2 background processes are already running (bash_1, bash_2)", "bash_kill")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.env.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := b.procsMatching(t, "sleep 3141"); left != "" {
		t.Errorf("left after Close:\n%s", left)
	}
	wantErr(t, b.call(t, "bash", `{"command": "sleep 3141", "run_in_background": true}`), "the session is ending")
}
