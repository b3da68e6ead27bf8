package owner_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/harvest-dev/harvest/sandbox/owner"
)

// holdEnv makes the test binary a process that holds an owner (holder):
// "share:DIR:ID" or "instance:DIR".
const holdEnv = "OWNER_TEST_HOLD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(holdEnv); spec != "" {
		os.Exit(hold(spec))
	}
	goleak.VerifyTestMain(m)
}

// hold holds an owner, prints its ID, and waits for stdin to end.
func hold(spec string) int {
	var h *owner.Hold
	var err error
	switch kind, rest, _ := cutColon(spec); kind {
	case "share":
		dir, id, _ := cutColon(rest)
		h, err = owner.Share(context.Background(), dir, id, nil)
	case "instance":
		h, err = owner.NewInstance(rest)
	default:
		err = fmt.Errorf("bad %s %q", holdEnv, spec)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(h.ID())
	bufio.NewReader(os.Stdin).ReadString('\n') // until killed, or stdin ends
	return 0
}

func cutColon(s string) (string, string, bool) {
	for i := range s {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// holder is another process holding an owner.
type holder struct {
	cmd *exec.Cmd
	id  string
}

func startHolder(t *testing.T, spec string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holdEnv+"="+spec)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the holder process: %v", err)
	}
	return &holder{cmd: cmd, id: line[:len(line)-1]}
}

// kill9 kills the holder with SIGKILL and waits until it is gone.
func (h *holder) kill9(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	h.cmd.Wait()
}

func claimable(t *testing.T, dir, id string) bool {
	t.Helper()
	c, ok, err := owner.TryClaim(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		c.Release()
	}
	return ok
}

// TestInstanceDiesWithItsProcess: an instance held by another process is
// not claimable while it runs, whatever this process does, and is once it
// was killed with SIGKILL (the kernel dropped its lock); a released one is
// claimable at once, and its lock file is gone.
func TestInstanceDiesWithItsProcess(t *testing.T) {
	dir := t.TempDir()
	h := startHolder(t, "instance:"+dir)
	if claimable(t, dir, h.id) {
		t.Fatal("an instance another process holds was claimed")
	}
	if _, err := owner.Share(ctxFor(t, 100*time.Millisecond), dir, h.id, nil); !errors.Is(err, owner.ErrPruning) {
		t.Fatalf("sharing an instance another process holds: %v, want ErrPruning (it is exclusive)", err)
	}
	h.kill9(t)
	if !claimable(t, dir, h.id) {
		t.Fatal("the instance of a process killed with SIGKILL is still held")
	}

	mine, err := owner.NewInstance(dir)
	if err != nil {
		t.Fatal(err)
	}
	if mine.ID() == h.id {
		t.Fatal("two instances got the same ID")
	}
	if claimable(t, dir, mine.ID()) {
		t.Fatal("this process's own instance was claimed through another open file")
	}
	if err := mine.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, mine.ID()+".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a released instance's lock file: %v, want it removed", err)
	}
	if !claimable(t, dir, mine.ID()) {
		t.Error("a released instance is still held")
	}
}

// TestSharedOwner: several processes share an owner; it is held while any
// of them runs.
func TestSharedOwner(t *testing.T) {
	dir := t.TempDir()
	const id = "serve-0123456789abcdef"
	a := startHolder(t, "share:"+dir+":"+id)
	b := startHolder(t, "share:"+dir+":"+id)
	mine, err := owner.Share(ctxFor(t, 10*time.Second), dir, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mine.Sole() {
		t.Fatal("Sole with two other processes sharing the owner")
	}
	a.kill9(t)
	if claimable(t, dir, id) {
		t.Fatal("claimed while two processes share it")
	}
	b.kill9(t)
	if claimable(t, dir, id) {
		t.Fatal("claimed while this process shares it (Sole gave it back)")
	}
	if !mine.Sole() {
		t.Fatal("not Sole once the others are gone")
	}
	mine.Release()
	if stale, err := owner.Stale(dir); err != nil || !slices.Contains(stale, id) {
		t.Errorf("Stale: %v %v, want %s (its file stays for the next server)", stale, err, id)
	}
	if !claimable(t, dir, id) {
		t.Fatal("not claimable once nobody holds it")
	}
	if fileExists(filepath.Join(dir, id+".lock")) {
		t.Error("a released claim left the lock file")
	}
}

// TestShareWaitsForPrune: a server starting while a pruner has claimed its
// owner waits (told once) until the claim is released, then holds the
// owner afresh; a pruner cannot claim it after that.
func TestShareWaitsForPrune(t *testing.T) {
	dir := t.TempDir()
	const id = "serve-feedfacefeedface"
	c, ok, err := owner.TryClaim(dir, id)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	waited := 0
	if _, err := owner.Share(ctxFor(t, 200*time.Millisecond), dir, id, func() { waited++ }); !errors.Is(err, owner.ErrPruning) {
		t.Fatalf("Share under a claim: %v, want ErrPruning", err)
	}
	if waited != 1 {
		t.Errorf("told %d times it waits, want 1", waited)
	}
	type result struct {
		h   *owner.Hold
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := owner.Share(ctxFor(t, time.Minute), dir, id, nil)
		got <- result{h, err}
	}()
	// The claim's release removes the lock file: the waiting Share must
	// hold the file at the path afterwards, not the removed one.
	c.Release()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.h.Release()
	if claimable(t, dir, id) {
		t.Fatal("a pruner claimed an owner a server holds (it locked a removed file?)")
	}
}

// TestLegacyPidOwner: an owner named by a pid (an older Harvest's warm
// boxes) is claimable only when no process has that pid.
func TestLegacyPidOwner(t *testing.T) {
	dir := t.TempDir()
	if claimable(t, dir, strconv.Itoa(os.Getpid())) {
		t.Error("the legacy owner of a running pid was claimed")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if !claimable(t, dir, strconv.Itoa(cmd.Process.Pid)) {
		t.Error("the legacy owner of a pid that exited is not claimable")
	}
}

func TestBadIDs(t *testing.T) {
	for _, id := range []string{"", "../x", "a/b", ".hidden", "UPPER", "x y"} {
		if _, _, err := owner.TryClaim(t.TempDir(), id); err == nil {
			t.Errorf("TryClaim(%q): no error", id)
		}
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestDirFor: the backends' default run dirs share one owners' directory;
// any other run dir has its own.
func TestDirFor(t *testing.T) {
	if a, b := owner.DirFor("/run/harvest/local", "local"), owner.DirFor("/run/harvest/docker", "docker"); a != "/run/harvest/owners" || b != a {
		t.Errorf("the default run dirs: %s and %s, want /run/harvest/owners for both", a, b)
	}
	if d := owner.DirFor("/tmp/test-123", "local"); d != "/tmp/test-123/.owners" {
		t.Errorf("another run dir: %s, want its own .owners", d)
	}
}
