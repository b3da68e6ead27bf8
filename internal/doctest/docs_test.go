package doctest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

// TestDocs runs every runnable block of README.md and docs/*.md, in order,
// against a real harvest serve (see the package doc).
func TestDocs(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []Block
	for _, f := range files {
		bs, err := Extract(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := range bs {
			bs[i].File, _ = filepath.Rel(root, bs[i].File)
		}
		blocks = append(blocks, bs...)
	}
	if len(blocks) < 20 {
		t.Fatalf("%d runnable blocks in %s: the docs mark their commands ```%s", len(blocks), strings.Join(files, ", "), Marker)
	}

	testreq.NeedRoot(t, "the docs' commands run sessions in local boxes")
	testreq.Check(t, testreq.Disks, disk.Check(context.Background(), ""))
	env := newDocEnv(t, root)
	r := &Runner{Dir: env.work, Env: env.vars, Out: func(b Block, out string) {
		t.Logf("%s: output:\n%s", b.Where(), out)
	}}
	for _, b := range blocks {
		t.Run(strings.ReplaceAll(b.Where(), "/", "_"), func(t *testing.T) {
			start := time.Now()
			// The block's own deadline bounds it; the test's context only
			// ends with the test.
			if err := r.Run(t.Context(), b); err != nil {
				t.Fatalf("%v\n--- harvest serve's stderr so far:\n%s", err, tail(env.serveErr.String(), 4<<10))
			}
			t.Logf("%s: ok in %v", b.Where(), time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestBrokenBlockFails: the runner fails a block whose command fails, and
// the failure names the block's line in its file; the blocks around it
// pass. testdata/broken.md is the fixture: its third runnable block calls
// a harvest subcommand that does not exist.
func TestBrokenBlockFails(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Extract("testdata/broken.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 4 {
		t.Fatalf("testdata/broken.md: %d runnable blocks, want 4 (the plain sh block is not one)", len(blocks))
	}
	bin := binDir(t)
	work := t.TempDir()
	if err := Mirror(root, work); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Dir: work, Env: append(cleanEnv(), "HOME="+t.TempDir(), "PATH="+bin+":"+os.Getenv("PATH"))}
	want := map[int]string{ // line → what its failure says; "" passes
		7:  "",
		13: "",
		21: "exited 2",
		27: "was still running after its deadline, 1s",
	}
	for _, b := range blocks {
		err := r.Run(context.Background(), b)
		w, ok := want[b.Line]
		switch {
		case !ok:
			t.Errorf("a runnable block at %s, which the fixture does not have", b.Where())
		case w == "" && err != nil:
			t.Errorf("%s: %v", b.Where(), err)
		case w != "" && err == nil:
			t.Errorf("%s: passed; it is broken and must fail", b.Where())
		case w != "":
			prefix := "testdata/broken.md:" + strconv.Itoa(b.Line) + ": the block " + w
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("%s failed with:\n%v\nwant it to start with %q", b.Where(), err, prefix)
			}
			t.Logf("the broken block fails as it should:\n%v", err)
		}
	}
	// The block that timed out started a sleep in the background: its
	// process group was ended with it.
	if procs := testbin.ProcsWith("doctest-broken-fixture-sleep"); len(procs) > 0 {
		t.Errorf("the timed-out block left processes behind: %v", procs)
	}
}

// TestParse: the marker, timeouts, indentation, and the mistakes that must
// not pass silently.
func TestParse(t *testing.T) {
	src := "# t\n\n```sh\nnot run\n```\n\n- item\n\n  ```sh test timeout=5s\n  echo a\n    echo b\n  ```\n\n````sh test\n```\nnested\n````\n"
	bs, err := Parse("x.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Line != 9 || bs[0].Timeout != 5*time.Second || bs[0].Script != "echo a\n  echo b\n" ||
		bs[1].Line != 14 || bs[1].Timeout != DefaultTimeout || bs[1].Script != "```\nnested\n" {
		t.Fatalf("parsed %+v", bs)
	}
	for src, want := range map[string]string{
		"a\n```sh test timout=5s\nx\n```\n": "x.md:2: ",
		"```sh test timeout=5\nx\n```\n":    "x.md:1: ",
		"a\n\n```sh test\nx\n":              "x.md:3: the runnable block is never closed",
	} {
		if _, err := Parse("x.md", []byte(src)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want an error starting %q", src, err, want)
		}
	}
}

// binDir is a directory holding the test's harvest and harvest-agent, to
// put first on the blocks' PATH.
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, p := range map[string]string{"harvest": testbin.Harvest(t), "harvest-agent": testbin.Agent(t)} {
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cleanEnv is the test's environment without what would point the blocks
// at something else: model keys and Harvest's own settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "OPENAI_") || strings.HasPrefix(k, "OTEL_") ||
			(strings.HasPrefix(k, "HARVEST_") && !strings.HasPrefix(k, "HARVEST_TEST_") && !strings.HasPrefix(k, "HARVEST_REQUIRE") &&
				k != "HARVEST_CLI_PREFIX") || k == "HOME" || k == "PATH" || k == "TMPDIR" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// docEnv is where the docs' blocks run: a home, a server, a box directory.
type docEnv struct {
	work     string // the blocks' working directory (a mirror of the module root)
	vars     []string
	serveErr *testbin.Buffer
}

func newDocEnv(t *testing.T, root string) *docEnv {
	t.Helper()
	bin := binDir(t)
	home := testbin.TempDir(t)
	// The box user traverses these (testbin.TempDir: 0711).
	work := testbin.TempDir(t)
	tmp := testbin.TempDir(t)
	runDir := testbin.TempDir(t)
	if err := Mirror(root, work); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(home, ".harvest")
	base := append(cleanEnv(), "HOME="+home, "TMPDIR="+tmp, "HARVEST_RUN_DIR="+runDir, "PATH="+bin+":"+os.Getenv("PATH"))

	// The server: no model key (the demo on harvest sim), port 0, a fresh
	// data directory; its boxes destroyed when it stops.
	cmd := exec.Command(filepath.Join(bin, "harvest"), "serve", "--listen", "127.0.0.1:0", "--data", data, "--pool", "0",
		"--stop-boxes-on-exit", "--shutdown-grace", "5s")
	cmd.Env = base
	cmd.Dir = work
	errBuf := &testbin.Buffer{}
	cmd.Stderr = errBuf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "harvest serve listening on "); ok {
				urls <- u
			}
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("harvest serve at the end: %v\n%s", err, tail(errBuf.String(), 4<<10))
			}
		case <-time.After(time.Minute):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("harvest serve did not stop within a minute of SIGTERM")
		}
	})
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("harvest serve exited before it listened: %v\n%s", err, errBuf.String())
	case <-time.After(time.Minute):
		t.Fatalf("harvest serve did not listen within a minute:\n%s", errBuf.String())
	}
	token, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	vars := append(base, "HARVEST_SERVER="+url, "HARVEST_TOKEN="+strings.TrimSpace(string(token)))
	return &docEnv{work: work, vars: vars, serveErr: errBuf}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "[...]\n" + s[len(s)-n:]
	}
	return s
}
