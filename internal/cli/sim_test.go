package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim"
)

// TestSimBadInput: every mistake is one clear error; exit 2 for bad flags,
// scripts and cassettes, 1 when serving fails.
func TestSimBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: x\n    reply: {txt: hi}\n"), 0o644)
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("rules:\n  - reply: {text: hi}\n"), 0o644)
	notCassette := filepath.Join(dir, "c.json")
	os.WriteFile(notCassette, []byte("{}"), 0o644)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim"}, 2, "nothing to serve: give --script FILE, --replay CASSETTE or --record UPSTREAM --cassette FILE"},
		{[]string{"sim", "--script", good, "--replay", notCassette}, 2, "--script, --replay and --record exclude each other"},
		{[]string{"sim", "--record", "https://api.anthropic.com"}, 2, "--record needs --cassette FILE"},
		{[]string{"sim", "--script", good, "--cassette", "x.json"}, 2, "--cassette is the file --record writes; to serve a cassette use --replay FILE"},
		{[]string{"sim", "--record", "api.anthropic.com", "--cassette", filepath.Join(dir, "o.json")}, 2, `--record "api.anthropic.com": give the API's base URL, like https://api.anthropic.com`},
		{[]string{"sim", "--record", "https://api.anthropic.com", "--cassette", "/no/such/dir/c.json"}, 2, "--cassette /no/such/dir/c.json: directory /no/such/dir does not exist"},
		{[]string{"sim", "--script", filepath.Join(dir, "missing.yaml")}, 2, "reading script: open " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
		{[]string{"sim", "--script", bad}, 2, bad + `:3: unknown field "txt" in reply (known: thinking, text, tool_calls, stop_reason, usage, delay, chunk_delay, error)`},
		{[]string{"sim", "--replay", notCassette}, 2, "cassette " + notCassette + ": version 0, this sim reads version 1"},
		{[]string{"sim", "--script", good, "--listen", busy.Addr().String()}, 1, "--listen " + busy.Addr().String() + ": listen tcp " + busy.Addr().String() + ": bind: address already in use"},
		{[]string{"sim", "--script", good, "--listen", "127.0.0.1:99999"}, 1, "--listen 127.0.0.1:99999:"},
		{[]string{"sim", "--script", good, "extra"}, 2, `unknown command "extra" for "harvest sim"`},
		{[]string{"sim", "--scrpt", good}, 2, "unknown flag: --scrpt"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("harvest %s:\n  exit %d, want %d\n  stderr %q\n  want it to contain %q", strings.Join(c.args, " "), code, c.code, stderr, c.want)
		}
		if stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("harvest %s: stdout %q; more than one error line:\n%s", strings.Join(c.args, " "), stdout, stderr)
		}
	}
}

// simBinary is a running `harvest sim` process.
type simBinary struct {
	cmd    *exec.Cmd
	url    string
	stderr bytes.Buffer
	done   chan error
	exited bool // done has been received
}

func startSimBinary(t *testing.T, args ...string) *simBinary {
	t.Helper()
	cmd := exec.Command(testbin.Harvest(t), append([]string{"sim"}, args...)...)
	s := &simBinary{cmd: cmd, done: make(chan error, 1)}
	cmd.Stderr = &s.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(out)
	line, err := lines.ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("harvest sim %s: %v; stderr:\n%s", strings.Join(args, " "), err, s.stderr.String())
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "harvest sim listening on ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line %q", line)
	}
	s.url = url
	go func() {
		rest, _ := io.ReadAll(lines) // nothing more is printed on stdout
		if len(rest) > 0 {
			t.Errorf("harvest sim printed more on stdout: %q", rest)
		}
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if !s.exited {
			cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// stop signals the process and waits for it to exit, failing the test if it
// does not exit 0 within a minute.
func (s *simBinary) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	s.cmd.Process.Signal(sig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case err := <-s.done:
		s.exited = true
		if err != nil {
			t.Errorf("harvest sim exited with %v after %v; stderr:\n%s", err, sig, s.stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("harvest sim did not exit after %v", sig)
	}
}

func postJSON(t *testing.T, url, body string, header ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestSimBinary runs the real binary: it prints its address, serves a
// script, logs each request to stderr, exits 0 on SIGTERM and SIGINT, and
// records a cassette from another sim and replays it.
func TestSimBinary(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	chat := filepath.Join(root, "sim", "examples", "chat.yaml")
	up := startSimBinary(t, "--script", chat)
	anthHeaders := []string{"x-api-key", "sk-ant-cli-test", "anthropic-version", "2023-06-01"}
	hello := `{"model":"claude-sonnet-4-5","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`
	code, body := postJSON(t, up.url+"/v1/messages", hello, anthHeaders...)
	if code != 200 || !strings.Contains(string(body), "event: message_stop") {
		t.Fatalf("%d %s", code, body)
	}

	// Record through a second process, then replay the cassette in a third.
	cassette := filepath.Join(t.TempDir(), "chat.json")
	rec := startSimBinary(t, "--record", up.url, "--cassette", cassette)
	other := `{"model":"gpt-4.1","messages":[{"role":"user","content":"what is this?"}]}`
	c1, recorded1 := postJSON(t, rec.url+"/v1/messages", hello, anthHeaders...)
	c2, recorded2 := postJSON(t, rec.url+"/v1/chat/completions", other, "Authorization", "Bearer sk-cli-test")
	if c1 != 200 || c2 != 200 {
		t.Fatalf("through the recorder: %d %s / %d %s", c1, recorded1, c2, recorded2)
	}
	rec.stop(t, syscall.SIGINT)
	up.stop(t, syscall.SIGTERM)
	if !strings.Contains(up.stderr.String(), "rule=greeting") || !strings.Contains(up.stderr.String(), `key="sk-ant…test (15 chars)"`) {
		t.Errorf("the request log line:\n%s", up.stderr.String())
	}
	raw, _ := os.ReadFile(cassette)
	if strings.Contains(string(raw), "sk-ant-cli-test") || strings.Contains(string(raw), "sk-cli-test") {
		t.Errorf("the cassette holds an API key:\n%s", raw)
	}

	rep := startSimBinary(t, "--replay", cassette, "--quiet")
	if code, got := postJSON(t, rep.url+"/v1/chat/completions", other, "Authorization", "Bearer x"); code != 200 || !bytes.Equal(got, recorded2) {
		t.Errorf("replayed %d %s, recorded %s", code, got, recorded2)
	}
	if code, got := postJSON(t, rep.url+"/v1/messages", hello, anthHeaders...); code != 200 || !bytes.Equal(got, recorded1) {
		t.Errorf("replayed %d %s, recorded %s", code, got, recorded1)
	}
	resp, err := http.Get(rep.url + "/_sim/requests")
	if err != nil {
		t.Fatal(err)
	}
	var reqs []sim.Request
	json.NewDecoder(resp.Body).Decode(&reqs)
	resp.Body.Close()
	if len(reqs) != 2 || reqs[0].Rule != "cassette #2 (by body)" || reqs[1].Rule != "cassette #1 (by body)" {
		t.Errorf("replay log %+v", reqs)
	}
	rep.stop(t, syscall.SIGTERM)
	if rep.stderr.Len() != 0 {
		t.Errorf("--quiet still logged:\n%s", rep.stderr.String())
	}
}
