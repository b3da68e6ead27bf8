package modelproxy

import (
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

const ocModel = "sim-coder"

// ocPrices prices the sim's OpenCode model, so a budget can apply to it.
func ocPrices() *llm.PriceTable {
	return llm.NewPriceTable(map[string]llm.Price{ocModel: {Input: 2, Output: 8, CacheRead: 0.5}})
}

// runOpenCode runs `opencode run prompt` as the box user in dir, with an
// OpenAI-compatible provider whose base URL is the proxy and whose key is
// token, and returns its exit error and output.
func runOpenCode(t *testing.T, opencode, proxyURL, token, dir string, prompt string) (string, error) {
	t.Helper()
	home := ownedDir(t, "home")
	cfg, _ := json.Marshal(map[string]any{
		"provider": map[string]any{"harvest": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "Harvest",
			"options": map[string]any{"baseURL": proxyURL + "/v1", "apiKey": token},
			"models":  map[string]any{ocModel: map[string]any{"name": "Sim coder", "tool_call": true}},
		}},
		"model": "harvest/" + ocModel, "small_model": "harvest/" + ocModel,
		"autoupdate": false, "share": "disabled",
		"permission": map[string]any{"edit": "allow", "bash": "allow", "webfetch": "deny"},
	})
	cfgPath := filepath.Join(testbin.TempDir(t), "opencode.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, opencode, "run", prompt)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "OPENCODE_CONFIG=" + cfgPath,
		"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_SHARE=1",
		// At start OpenCode npm-installs a plugin; it works without it.
		"npm_config_registry=http://127.0.0.1:9/", "npm_config_offline=true",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: boxUID, Gid: boxUID}
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("opencode run (%v):\n%s", err, out.String())
		}
	})
	return out.String(), err
}

// The real OpenCode CLI, its provider's base URL the proxy and its key a
// session token, does the scripted task through the proxy (what it calls:
// POST /v1/chat/completions only, streamed with usage, plus a title request
// alongside the first turn); the sim gets the real key on every request,
// and the session's usage is the script's in llm's terms.
func TestOpenCodeThroughProxy(t *testing.T) {
	opencode := testbin.OpenCode(t)
	text := exampleScript(t, "opencode.yaml")
	h := newHarness(t, text, func(c *Config) { c.Prices = ocPrices() })
	var got usageLog
	tok := h.grant(Grant{Session: "oc-1", OnUsage: got.add})
	ws := ownedDir(t, "ws")

	out, err := runOpenCode(t, opencode, h.url, tok, ws,
		"Write a greeting script greet.sh that greets its first argument, run it with the argument harvest saving the output to out.txt, and check the output.")
	if err != nil || !strings.Contains(out, `Done: greet.sh prints "hello, harvest"`) {
		t.Errorf("opencode run: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "hello, harvest\n" {
		t.Errorf("out.txt = %q, %v: the tools did not run", b, err)
	}
	script := parseScript(t, text)
	var rules []string
	for _, r := range h.sim.Requests() {
		if r.Method != "POST" || r.Path != "/v1/chat/completions" || r.Status != 200 {
			t.Errorf("the sim got %s %s (%d)", r.Method, r.Path, r.Status)
		}
		rules = append(rules, r.Rule)
	}
	slices.Sort(rules)
	if want := []string{"read-output", "report", "run-script", "title", "write-script"}; !slices.Equal(rules, want) {
		t.Errorf("rules used %q, want %q", rules, want)
	}
	var sum, want llm.Usage
	var cost float64
	for _, u := range got.all() {
		sum = sum.Add(u.Tokens)
		cost += u.CostUSD
	}
	for _, r := range rules {
		// OpenAI's view of the scripted usage: cache writes are in
		// prompt_tokens and not reported apart, so they count as input.
		u := scripted(t, script, r)
		u.InputTokens += u.CacheWriteTokens
		u.CacheWriteTokens = 0
		want = want.Add(u)
	}
	wantCost, _ := ocPrices().Cost(ocModel, want)
	if sum != want || len(got.all()) != 5 || !near(cost, wantCost) || !near(h.proxy.Spent("oc-1"), wantCost) {
		t.Errorf("recorded %d calls, %+v, $%v; want 5, %+v, $%v", len(got.all()), sum, cost, want, wantCost)
	}
}

// OpenCode over its budget stops too: the 402 ends its run with the
// proxy's message, and it does not retry.
func TestOpenCodeStopsAtBudget(t *testing.T) {
	opencode := testbin.OpenCode(t)
	h := newHarness(t, exampleScript(t, "opencode.yaml"), func(c *Config) { c.Prices = ocPrices() })
	tok := h.grant(Grant{Session: "oc-2", BudgetUSD: 0.000001})
	ws := ownedDir(t, "ws")

	out, err := runOpenCode(t, opencode, h.url, tok, ws,
		"Write a greeting script greet.sh that greets its first argument, run it with the argument harvest saving the output to out.txt, and check the output.")
	if err == nil || !strings.Contains(out, "the model budget of session oc-2 is spent") {
		t.Errorf("opencode run: %v, want the proxy's message and a failure", err)
	}
	// OpenCode makes at most three calls here: the title (a side request,
	// at any time), the first turn, admitted as nothing was spent, and the
	// second, refused. A retry would be a fourth.
	forwarded, refused := len(h.sim.Requests()), strings.Count(h.logs.String(), "status=402")
	if forwarded < 1 || refused < 1 || forwarded+refused > 3 {
		t.Errorf("%d requests forwarded, %d refused for the budget: want the first turn through, the next refused, no retry", forwarded, refused)
	}
}
