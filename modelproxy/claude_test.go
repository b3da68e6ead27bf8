package modelproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/llm"
)

// boxUID is the unprivileged user the CLIs run as when the tests run as
// root (Claude Code refuses bypassPermissions as root).
const boxUID = 1000

const claudeModel = "claude-sonnet-4-5"

// claudeResult is the last line of `claude -p --output-format stream-json`.
type claudeResult struct {
	Type           string  `json:"type"`
	Subtype        string  `json:"subtype"`
	IsError        bool    `json:"is_error"`
	APIErrorStatus int     `json:"api_error_status"`
	NumTurns       int     `json:"num_turns"`
	Result         string  `json:"result"`
	TotalCostUSD   float64 `json:"total_cost_usd"`
	Usage          struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

// ownedDir is a fresh directory the box user owns.
func ownedDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(testbin.TempDir(t), name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(d, boxUID, boxUID); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// claudeEnv is what Harvest gives Claude Code: the proxy as its API and a
// session token as its key, and nothing of the host's.
func claudeEnv(baseURL, token, home string) []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"ANTHROPIC_BASE_URL=" + baseURL,
		"ANTHROPIC_API_KEY=" + token,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
	}
}

// runClaudeOnHost runs `claude -p prompt` as the box user in dir and
// returns its result line, failing the test if there is none.
func runClaudeOnHost(t *testing.T, claude, dir string, env []string, prompt string) claudeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, claude, "-p", prompt, "--output-format", "stream-json", "--verbose",
		"--permission-mode", "bypassPermissions", "--model", claudeModel)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: boxUID, Gid: boxUID}
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res, ok := resultLine(stdout.Bytes())
	if !ok {
		t.Fatalf("claude printed no result line (%v); stdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("claude stream-json:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})
	return res
}

func resultLine(out []byte) (claudeResult, bool) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r claudeResult
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Type == "result" {
			return r, true
		}
	}
	return claudeResult{}, false
}

func exampleScript(t *testing.T, name string) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "sim", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The real Claude Code CLI, given the proxy as ANTHROPIC_BASE_URL and a
// session token as ANTHROPIC_API_KEY, does the scripted four-turn task
// (Write, Bash, Read, answer) through the proxy: every request reaches the
// sim with the real key (the harness checks each), its connectivity probe
// is answered without being forwarded, the session's recorded usage is
// exactly the script's and the CLI's own count, priced as the CLI prices
// it, and no byte sent to the CLI holds the key.
func TestClaudeCodeThroughProxy(t *testing.T) {
	claude := testbin.Claude(t)
	text := exampleScript(t, "claude-code.yaml")
	h := newHarness(t, text, nil)
	var got usageLog
	tok := h.grant(Grant{Session: "cc-1", OnUsage: got.add})
	ws, home := ownedDir(t, "ws"), ownedDir(t, "home")

	res := runClaudeOnHost(t, claude, ws, claudeEnv(h.url, tok, home),
		"Write a greeting script greet.sh that greets its first argument, run it with the argument harvest saving the output to out.txt, and check the output.")

	script := parseScript(t, text)
	rules := []string{"write-script", "run-script", "read-output", "report"}
	if res.Subtype != "success" || res.IsError || res.NumTurns != 4 || !strings.HasPrefix(res.Result, "Done: greet.sh prints") {
		t.Errorf("result: %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "hello, harvest\n" {
		t.Errorf("out.txt = %q, %v: the tools did not run", b, err)
	}
	var used []string
	for _, r := range h.sim.Requests() {
		used = append(used, r.Method+" "+r.Path+" "+r.Rule)
	}
	var want []string
	for _, r := range rules {
		want = append(want, "POST /v1/messages "+r)
	}
	if !slices.Equal(used, want) {
		t.Errorf("the sim saw %q, want %q (the HEAD / probe is not forwarded)", used, want)
	}

	var sum, fromScript llm.Usage
	var cost float64
	us := got.all()
	for _, u := range us {
		sum = sum.Add(u.Tokens)
		cost += u.CostUSD
		if !u.Complete || !u.Stream || u.Model != claudeModel {
			t.Errorf("call %+v: want complete, streamed, %s", u, claudeModel)
		}
	}
	for _, r := range rules {
		fromScript = fromScript.Add(scripted(t, script, r))
	}
	cli := llm.Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens,
		CacheReadTokens: res.Usage.CacheReadInputTokens, CacheWriteTokens: res.Usage.CacheCreationInputTokens}
	if len(us) != 4 || sum != fromScript || sum != cli {
		t.Errorf("recorded %d calls, %+v in all; the script says %+v, the CLI %+v", len(us), sum, fromScript, cli)
	}
	if wantCost, _ := llm.DefaultPrices.Cost(claudeModel, fromScript); !near(cost, wantCost) || !near(h.proxy.Spent("cc-1"), wantCost) {
		t.Errorf("recorded cost %v, Spent %v, want %v", cost, h.proxy.Spent("cc-1"), wantCost)
	}
	if !near(cost, res.TotalCostUSD) {
		t.Errorf("the proxy priced the session at $%.6f, Claude Code at $%.6f", cost, res.TotalCostUSD)
	}
}

// Claude Code over its budget stops at once: the first call spends more
// than the session's budget, the second is refused with the 402, and the
// CLI ends its run with the proxy's message — no retry reaches the proxy,
// nothing more reaches the sim.
func TestClaudeCodeStopsAtBudget(t *testing.T) {
	claude := testbin.Claude(t)
	h := newHarness(t, exampleScript(t, "claude-code.yaml"), nil)
	tok := h.grant(Grant{Session: "cc-2", BudgetUSD: 0.05}) // the first reply costs $0.0613
	ws, home := ownedDir(t, "ws"), ownedDir(t, "home")

	res := runClaudeOnHost(t, claude, ws, claudeEnv(h.url, tok, home),
		"Write a greeting script greet.sh that greets its first argument, run it with the argument harvest saving the output to out.txt, and check the output.")

	if !res.IsError || res.APIErrorStatus != 402 || !strings.Contains(res.Result, "the model budget of session cc-2 is spent") ||
		!strings.Contains(res.Result, DefaultBudgetHelp) {
		t.Errorf("result %+v: want the 402 and the proxy's message", res)
	}
	if n := len(h.sim.Requests()); n != 1 {
		t.Errorf("the sim got %d requests, want only the first", n)
	}
	if n := strings.Count(h.logs.String(), "status=402"); n != 1 {
		t.Errorf("%d requests were refused for the budget, want 1 (Claude Code retried)", n)
	}
}
