package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
)

func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// TestBadInput: every mistake gives one clear error, exit 125 (or 2 for
// usage), and creates nothing.
func TestBadInput(t *testing.T) {
	missing := "/no/such/dir/for/harvest"
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sandbox", "run"}, 2, "no command: give it after --"},
		{[]string{"sandbox", "run", "--backend", "local", "--runtime", "runsc", "--", "true"}, 2, "--runtime runsc is for --backend docker, not local"},
		{[]string{"sandbox", "run", "--runtime", "runsc", "--", "true"}, 2, "--runtime runsc is for --backend docker"},
		{[]string{"sandbox", "run", "--memory", "lots", "--", "true"}, 125, "--memory: size \"lots\": use a number with an optional unit"},
		{[]string{"sandbox", "run", "--memory", "1m", "--", "true"}, 125, "must be at least 32MiB"},
		{[]string{"sandbox", "run", "--workspace", missing, "--", "true"}, 125, "does not exist: create it or pass an existing directory"},
		{[]string{"sandbox", "run", "--backend", "podman", "--", "true"}, 125, `unknown backend "podman": choose one of`},
		{[]string{"sandbox", "run", "--backend", "host", "--", "true"}, 125, "pass --unsafe-host to allow it"},
		{[]string{"sandbox", "run", "--env", "TOKEN", "--", "true"}, 125, "--env TOKEN: use KEY=VALUE"},
		{[]string{"sandbox", "run", "--user", "root", "--", "true"}, 125, `--user "root": use numeric UID[:GID]`},
		{[]string{"sandbox", "run", "--user", "0:0", "--", "true"}, 125, "the box user must not be root"},
		{[]string{"sandbox", "run", "--network", "host", "--", "true"}, 125, `network "host": only "none" is supported`},
		{[]string{"sandbox", "run", "--tty", "maybe", "--", "true"}, 125, `--tty "maybe": use auto, always or never`},
		{[]string{"sandbox", "run", "--pids", "-3", "--", "true"}, 125, "--pids -3: must be positive"},
		{[]string{"sandbox", "run", "--bogus", "--", "true"}, 2, "unknown flag: --bogus"},
		{[]string{"sandbox", "rm"}, 2, "give box ids, or --all"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("harvest %s:\n  exit %d, want %d\n  stderr %q\n  want it to contain %q", strings.Join(c.args, " "), code, c.code, stderr, c.want)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 2 {
			t.Errorf("harvest %s: more than one error:\n%s", strings.Join(c.args, " "), stderr)
		}
	}
}

// TestBinary runs the real harvest binary end to end on the default backend.
func TestBinary(t *testing.T) {
	needRoot(t)
	bin := testbin.Harvest(t)
	agent := testbin.Agent(t)
	// Its own run dir: "sandbox ls" must see this test's boxes only, not
	// those of other tests (or people) on the machine.
	env := append(os.Environ(), "HARVEST_AGENT_BINARY="+agent, "HARVEST_RUN_DIR="+testbin.TempDir(t))
	runBin := func(stdin string, args ...string) (int, string, string) {
		return runBinary(t, bin, env, stdin, args...)
	}

	code, out, errOut := runBin("", "doctor", "--json")
	var report struct {
		OK       bool `json:"ok"`
		Backends []struct {
			Backend   string `json:"backend"`
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
			Fix       string `json:"fix"`
		} `json:"backends"`
		Agents []struct {
			Agent     string `json:"agent"`
			Available bool   `json:"available"`
			Version   string `json:"version"`
			Reason    string `json:"reason"`
		} `json:"agents"`
		Disks struct {
			Available bool   `json:"available"`
			Mechanism string `json:"mechanism"`
			Reason    string `json:"reason"`
		} `json:"disk_limits"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, out, errOut)
	}
	// local, docker, docker with each optional runtime (runsc), host.
	if len(report.Backends) != 4 || (code == 0) != report.OK {
		t.Fatalf("doctor: exit %d, %+v", code, report)
	}
	for _, b := range report.Backends {
		if !b.Available && (b.Reason == "" || b.Fix == "") {
			t.Errorf("doctor says %s is unavailable without saying why and how to fix it: %+v", b.Backend, b)
		}
	}
	if d := report.Disks; d.Mechanism == "" || (!d.Available && d.Reason == "") {
		t.Errorf("doctor: disk limits %+v: want the mechanism, and why not when unavailable", d)
	}
	if len(report.Agents) != 3 {
		t.Errorf("doctor reports %d agent CLIs, want claudecode, opencode, terminal: %+v", len(report.Agents), report.Agents)
	}
	for _, a := range report.Agents {
		switch {
		case a.Available && a.Version == "":
			t.Errorf("doctor: %s available without a version", a.Agent)
		case !a.Available && (a.Reason == "" || testreq.Required(testreq.CLIs)):
			t.Errorf("doctor: %s unavailable: %q", a.Agent, a.Reason)
		}
	}

	if code, out, _ := runBin("hello box\n", "sandbox", "run", "--", "tr", "a-z", "A-Z"); code != 0 || out != "HELLO BOX\n" {
		t.Errorf("stdin through a box: exit %d, %q", code, out)
	}
	if code, _, _ := runBin("", "sandbox", "run", "--", "sh", "-c", "exit 42"); code != 42 {
		t.Errorf("exit status: %d", code)
	}
	if code, _, _ := runBin("", "sandbox", "run", "--", "sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Errorf("killed by SIGTERM: exit %d, want 143", code)
	}
	if code, _, errOut := runBin("", "sandbox", "run", "--", "no-such-command"); code != 127 || !strings.Contains(errOut, "not found") {
		t.Errorf("missing command: exit %d %q", code, errOut)
	}
	ws := testbin.Workspace(t, 1000, 1000)
	os.WriteFile(ws+"/in.txt", []byte("from the host"), 0o644)
	code, out, errOut = runBin("", "sandbox", "run", "--workspace", "proj="+ws, "--", "sh", "-c", "pwd; cat in.txt; echo from the box > out.txt")
	if code != 0 || out != "/workspace/proj\nfrom the host" {
		t.Errorf("workspace: exit %d %q %q", code, out, errOut)
	}
	if b, _ := os.ReadFile(ws + "/out.txt"); string(b) != "from the box\n" {
		t.Errorf("the box's write did not reach the workspace: %q", b)
	}
	code, _, errOut = runBin("", "sandbox", "run", "--memory", "64m", "--", "sh", "-c", "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}")
	if code != 137 || !strings.Contains(errOut, "out of memory") {
		t.Errorf("memory limit: exit %d %q", code, errOut)
	}
	// The box's time limit ending the command is said, not only a bare 143
	// (SIGTERM) or 137 (SIGKILL after the grace); 125 if the box went before
	// its agent could send the status.
	code, _, errOut = runBin("", "sandbox", "run", "--timeout", "2s", "--", "sleep", "1000")
	if code != 143 && code != 137 && code != 125 || !strings.Contains(errOut, "time limit") || !strings.Contains(errOut, "--timeout") {
		t.Errorf("box time limit: exit %d %q", code, errOut)
	}
	code, _, errOut = runBin("", "sandbox", "run", "--backend", "host", "--unsafe-host", "--", "true")
	if code != 0 || !strings.Contains(errOut, "NO isolation") {
		t.Errorf("host backend: exit %d, the unsafe warning missing: %q", code, errOut)
	}
	// Nothing is left behind by sandbox run.
	if _, out, _ := runBin("", "sandbox", "ls"); strings.Count(out, "\n") > 1 {
		t.Errorf("sandbox ls after the runs:\n%s", out)
	}

	// A kept box outlives the process that made it: another process recovers
	// it (ls shows it running) and removes it.
	code, _, errOut = runBin("", "sandbox", "run", "--keep", "--", "true")
	if code != 0 || !strings.Contains(errOut, "kept") {
		t.Fatalf("--keep: exit %d %q", code, errOut)
	}
	id := strings.Fields(errOut[strings.Index(errOut, "box ")+4:])[0]
	if _, out, _ := runBin("", "sandbox", "ls"); !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("a kept box, from another process:\n%s", out)
	}
	if code, out, errOut := runBin("", "sandbox", "rm", id); code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("sandbox rm: exit %d %q %q", code, out, errOut)
	}
	if _, out, _ := runBin("", "sandbox", "ls"); strings.Contains(out, id) {
		t.Errorf("still listed after rm:\n%s", out)
	}
	if code, _, errOut := runBin("", "sandbox", "rm", id); code != 1 || !strings.Contains(errOut, "no box "+id) {
		t.Errorf("rm of a removed box: exit %d %q", code, errOut)
	}

	// Ctrl-C: the command gets SIGINT, harvest exits with its status, and the
	// box is gone. SIGINT goes once sleep runs: a shell that catches SIGINT
	// (dash with -c does) and forks at that moment leaves its child between
	// fork and exec with the shell's handler, so that one ^C would be lost
	// (a terminal's too: a second ^C kills).
	marker := strconv.Itoa(100000 + (os.Getpid()+7)%800000) // a sleep no other test runs
	cmd := exec.Command(bin, "sandbox", "run", "--", "sh", "-c", "echo started; sleep "+marker)
	cmd.Env = env
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "started\n" {
		t.Fatalf("before Ctrl-C: %q", line)
	}
	testbin.WaitFor(t, 30*time.Second, "the command to sleep", func() bool { return sleeping(marker) })
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("after Ctrl-C: %v, want exit 130", err)
	}
	if _, out, _ := runBin("", "sandbox", "ls"); strings.Count(out, "\n") > 1 {
		t.Errorf("a box left after Ctrl-C:\n%s", out)
	}
}
