package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// The crash test re-executes this test binary as a child that writes to a
// database and prints an "ack" line after every write that returned nil.
// The parent kills it with SIGKILL in the middle of its stream, reopens the
// database and checks that every acknowledged write is there and the
// database is consistent.
//
// SIGKILL loses the process, not the machine: this proves the commit
// protocol (WAL, what is acknowledged when), not the fsyncs a power cut
// would need (those are synchronous=FULL's job, see the package doc).

const crashEnv = "HARVEST_SQLITE_CRASH_CHILD" // db path and session prefix

func TestCrashChild(t *testing.T) {
	v := os.Getenv(crashEnv)
	if v == "" {
		t.Skip("run by TestCrashDurability")
	}
	path, prefix, _ := strings.Cut(v, ",")
	crashChild(path, prefix)
}

// crashChild writes until it is killed: 4 writers, each creating sessions
// and adding messages, event batches and turn increments to them.
func crashChild(path, prefix string) {
	s, err := Open(path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	ack := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf("ack "+format+"\n", args...)
		mu.Unlock()
	}
	fail := func(err error) {
		mu.Lock()
		fmt.Println("error", err)
		os.Exit(1)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				id := fmt.Sprintf("%s-w%d-%d", prefix, w, n)
				if err := s.CreateSession(ctx, &store.Session{ID: id, Owner: "o", State: store.StateWorking}, nil); err != nil {
					fail(err)
				}
				ack("session %s", id)
				var seq int64
				for i := range 20 {
					m := &store.Message{ID: fmt.Sprintf("m%d", i), Session: id, Text: strings.Repeat("x", 100)}
					if err := s.AddMessage(ctx, m); err != nil {
						fail(err)
					}
					ack("message %s %s %d", id, m.ID, m.Seq)
					batch := make([]event.Event, 1+i%7)
					for k := range batch {
						seq++
						batch[k] = event.Event{Session: id, Seq: seq, Time: time.Now(), Data: event.ToolOutput{CallID: "c", Text: strings.Repeat("y", 200)}}
					}
					if err := s.AppendEvents(ctx, batch); err != nil {
						fail(err)
					}
					ack("event %s %d", id, seq)
					u, err := s.UpdateSession(ctx, id, func(s *store.Session) error { s.Turns++; return nil })
					if err != nil {
						fail(err)
					}
					ack("turns %s %d", id, u.Turns)
				}
			}
		}()
	}
	wg.Wait()
}

// acked is what a child acknowledged.
type acked struct {
	sessions map[string]bool
	messages map[string]map[string]int64 // session → id → seq
	lastSeq  map[string]int64
	turns    map[string]int
	n        int
}

func runCrashChild(t *testing.T, path, prefix string, killAfter int) acked {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path+","+prefix)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := acked{sessions: map[string]bool{}, messages: map[string]map[string]int64{}, lastSeq: map[string]int64{}, turns: map[string]int{}}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "error" {
			t.Fatalf("child: %s", sc.Text())
		}
		if len(f) < 3 || f[0] != "ack" {
			continue
		}
		a.n++
		switch f[1] {
		case "session":
			a.sessions[f[2]] = true
		case "message":
			seq, _ := strconv.ParseInt(f[4], 10, 64)
			if a.messages[f[2]] == nil {
				a.messages[f[2]] = map[string]int64{}
			}
			a.messages[f[2]][f[3]] = seq
		case "event":
			seq, _ := strconv.ParseInt(f[3], 10, 64)
			a.lastSeq[f[2]] = max(a.lastSeq[f[2]], seq)
		case "turns":
			n, _ := strconv.Atoi(f[3])
			a.turns[f[2]] = max(a.turns[f[2]], n)
		}
		// Lines already in the pipe when the child dies were acknowledged
		// before it died: keep reading them to EOF.
		if a.n >= killAfter && !killed {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child exited before it was killed: %v", err)
	}
	return a
}

func TestCrashDurability(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := filepath.Join(t.TempDir(), "harvest.db")
	ctx := context.Background()
	for round, killAfter := range []int{400, 1200} {
		a := runCrashChild(t, path, fmt.Sprintf("r%d", round), killAfter)
		s, err := Open(path)
		if err != nil {
			t.Fatalf("round %d: reopening after the kill: %v", round, err)
		}
		checkConsistent(t, s.r)
		for id := range a.sessions {
			got, err := s.GetSession(ctx, id)
			if err != nil {
				t.Fatalf("round %d: acknowledged session %s: %v", round, id, err)
			}
			if got.Turns < a.turns[id] {
				t.Errorf("round %d: session %s has %d turns, %d were acknowledged", round, id, got.Turns, a.turns[id])
			}
			msgs, err := s.Messages(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]int64{}
			for i, m := range msgs {
				have[m.ID] = m.Seq
				if m.Seq != int64(i+1) {
					t.Errorf("round %d: session %s: message seqs have a gap at %d", round, id, m.Seq)
				}
			}
			for mid, seq := range a.messages[id] {
				if have[mid] != seq {
					t.Errorf("round %d: acknowledged message %s/%s (seq %d) missing (have seq %d)", round, id, mid, seq, have[mid])
				}
			}
			evs, err := s.Events(ctx, id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(evs)) < a.lastSeq[id] {
				t.Errorf("round %d: session %s has %d events, %d were acknowledged", round, id, len(evs), a.lastSeq[id])
			}
			for i, ev := range evs {
				if ev.Seq != int64(i+1) {
					t.Fatalf("round %d: session %s: event seqs have a gap at %d", round, id, ev.Seq)
				}
			}
		}
		t.Logf("round %d: killed after %d acks (%d sessions): all present", round, a.n, len(a.sessions))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
