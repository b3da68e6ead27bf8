package modelproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// The acceptance point of the model proxy: a real local box (network
// none) reaches the model only through the proxy, served on a box
// listener, with a session token; the real key is nowhere in the box —
// not in any process's environment or command line, not in ps, not in any
// file under HOME, the workspace or /tmp — while the client runs and after.

// startBox starts a local box as the box user with ws as /workspace/repo
// and the mounts, destroyed when the test ends.
func startBox(t *testing.T, ws string, mounts ...sandbox.Mount) *sandbox.Sandbox {
	t.Helper()
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Available(ctx); err != nil {
		testreq.Unavailable(t, testreq.Local, "the local sandbox backend is not available: %v", err)
	}
	sb, err := p.Start(ctx, sandbox.Spec{
		Workspaces: []sandbox.Workspace{{Name: "repo", HostPath: ws}},
		User:       sandbox.User{UID: boxUID, GID: boxUID},
		Mounts:     mounts,
	})
	if err != nil {
		t.Fatalf("starting a box: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroying the box: %v", err)
		}
	})
	return sb
}

// serveInBox serves the harness's proxy on a listener in the box and
// returns its in-box address.
func (h *harness) serveInBox(sb *sandbox.Sandbox) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := sb.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatalf("listening in the box: %v", err)
	}
	h.serveOn(ln)
	return ln.Addr().String()
}

// scanScript prints, from inside the box, everything a process there can
// see that could hold a key: every process's environment and command line,
// ps, and every file under HOME, the workspace and /tmp (but the file the
// scan itself is written to, named harvest-scan.txt).
const scanScript = `
for f in /proc/[0-9]*/environ; do echo "== $f"; tr '\0' '\n' < "$f"; echo; done
for f in /proc/[0-9]*/cmdline; do echo "== $f"; tr '\0' ' ' < "$f"; echo; done
echo "== ps"; ps -eo pid,user,args
echo "== files"; find "$HOME" /workspace/repo /tmp -type f ! -name harvest-scan.txt -size -16M -print -exec cat {} +
`

// scanBox runs the scan in the box with env and returns what it printed.
func scanBox(t *testing.T, sb *sandbox.Sandbox, env ...string) string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", scanScript}, Env: env, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("scanning the box: %v %v\n%s", st, err, out.String())
	}
	return out.String()
}

// checkScan fails the test if the scan shows any part of a real key, or
// misses what it must see (which proves it looked).
func (h *harness) checkScan(what, scan string, mustSee ...string) {
	h.t.Helper()
	for _, key := range []string{h.anthKey, h.oaiKey} {
		for _, part := range canaryParts(key) {
			if strings.Contains(scan, part) {
				h.t.Errorf("%s: a real key (%q of it) is in the box", what, part)
			}
		}
	}
	for _, s := range mustSee {
		if !strings.Contains(scan, s) {
			h.t.Errorf("%s: the scan does not show %q, so it did not look everywhere:\n%s", what, s, scan)
		}
	}
}

// writeMarker puts a file in the workspace that the scan must print.
func writeMarker(t *testing.T, ws string) string {
	t.Helper()
	marker := "harvest-scan-marker-" + fmt.Sprint(time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(ws, "marker.txt"), []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return marker
}

// curl in the box talks to the model through the proxy with the session
// token, a wrong token gets the 401, and the box holds no real key.
func TestBoxCurl(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	var got usageLog
	tok := h.grant(Grant{Session: "box-curl", OnUsage: got.add})
	ws := ownedDir(t, "ws")
	marker := writeMarker(t, ws)
	sb := startBox(t, ws)
	addr := h.serveInBox(sb)

	curl := func(key, path, body string) (string, string) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := sb.Run(ctx, &sandbox.Cmd{
			Args:   []string{"sh", "-c", `curl -sS -w '\n%{http_code}' "http://$ADDR$APIPATH" -H "x-api-key: $KEY" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d "$BODY"`},
			Env:    []string{"ADDR=" + addr, "KEY=" + key, "APIPATH=" + path, "BODY=" + body},
			Stdout: &out, Stderr: &errb, Timeout: time.Minute,
		})
		if err != nil || !st.Success() {
			t.Fatalf("curl in the box: %v %v\n%s", st, err, errb.String())
		}
		body, code, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
		if i := strings.LastIndex(out.String(), "\n"); i >= 0 {
			body, code = out.String()[:i], out.String()[i+1:]
		}
		return code, body
	}
	req := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`
	if code, body := curl(tok, "/v1/messages", req); code != "200" || !strings.Contains(body, "Hello from the model, through Harvest's proxy.") {
		t.Errorf("curl with the token: %s %s", code, body)
	}
	if code, body := curl("sk-ant-guess", "/v1/messages", req); code != "401" || !strings.Contains(body, "authentication_error") {
		t.Errorf("curl with a wrong key: %s %s", code, body)
	}
	if us := got.all(); len(us) != 1 || us[0].Tokens.InputTokens != 1200 {
		t.Errorf("usage %+v", us)
	}
	// The scan's own environment holds the token: proof that it reads
	// environments.
	h.checkScan("box", scanBox(t, sb, "HARVEST_PROBE="+tok), "HARVEST_PROBE="+tok, marker, "== ps", "PID")
}

// Claude Code in the box, as Harvest will run it, works through the proxy
// on a box listener; while it runs, a Bash tool call it makes scans the
// box (its own environment included: the token must be there, the key
// must not), and after it exits the box is scanned again (its config and
// transcript files included).
func TestBoxClaudeCode(t *testing.T) {
	claude := testbin.Claude(t)
	if !strings.HasPrefix(claude, testbin.NPMPrefix+"/") {
		testreq.Unavailable(t, testreq.CLIs, "Claude Code at %s: the box mounts %s only", claude, testbin.NPMPrefix)
	}
	cmd, _ := json.Marshal("{" + scanScript + "} > /workspace/repo/harvest-scan.txt 2>&1; echo scanned")
	script := fmt.Sprintf(`
rules:
  - name: scan
    when: {api: anthropic, turn: 1, tools: [Bash]}
    reply:
      text: "Scanning the box."
      tool_calls: [{name: Bash, input: {command: %s, description: "Scan the box"}}]
      usage: {input_tokens: 300, output_tokens: 40}
  - name: done
    when: {api: anthropic, turn: 2, tool_result: "scanned"}
    reply: {text: "The scan is done.", usage: {input_tokens: 350, output_tokens: 8}}
`, cmd)
	h := newHarness(t, script, nil)
	var got usageLog
	tok := h.grant(Grant{Session: "box-claude", OnUsage: got.add})
	ws := ownedDir(t, "ws")
	marker := writeMarker(t, ws)
	sb := startBox(t, ws, sandbox.Mount{HostPath: testbin.NPMPrefix, BoxPath: testbin.NPMPrefix})
	addr := h.serveInBox(sb)

	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := sb.Run(ctx, &sandbox.Cmd{
		Args: []string{claude, "-p", "Scan the box.", "--output-format", "stream-json", "--verbose",
			"--permission-mode", "bypassPermissions", "--model", claudeModel},
		Env:    claudeEnv("http://"+addr, tok, "/home/user"),
		Stdout: &out, Stderr: &errb, Timeout: 3 * time.Minute,
	})
	res, ok := resultLine(out.Bytes())
	if err != nil || !st.Success() || !ok || res.IsError || res.Result != "The scan is done." {
		t.Fatalf("claude in the box: %v %v, result %+v\nstdout:\n%s\nstderr:\n%s", st, err, res, out.String(), errb.String())
	}
	if us := got.all(); len(us) != 2 || us[0].Tokens.InputTokens != 300 || us[1].Tokens.InputTokens != 350 {
		t.Errorf("usage %+v, want the two scripted calls", us)
	}
	during, err := os.ReadFile(filepath.Join(ws, "harvest-scan.txt"))
	if err != nil {
		t.Fatalf("the scan Claude Code ran: %v", err)
	}
	h.checkScan("while Claude Code ran", string(during), "ANTHROPIC_API_KEY="+tok, "claude", marker, "== ps")
	h.checkScan("after Claude Code", scanBox(t, sb, "HARVEST_PROBE="+tok), "HARVEST_PROBE="+tok, marker, "/home/user/.claude")
}
