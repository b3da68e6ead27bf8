package clis

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// claudeResult is the last line of `claude -p --output-format stream-json`.
type claudeResult struct {
	Type     string `json:"type"`
	Subtype  string `json:"subtype"`
	IsError  bool   `json:"is_error"`
	NumTurns int    `json:"num_turns"`
	Result   string `json:"result"`
	Usage    struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	ModelUsage map[string]struct {
		InputTokens              int `json:"inputTokens"`
		OutputTokens             int `json:"outputTokens"`
		CacheReadInputTokens     int `json:"cacheReadInputTokens"`
		CacheCreationInputTokens int `json:"cacheCreationInputTokens"`
	} `json:"modelUsage"`
}

const claudeModel = "claude-sonnet-4-5"

// TestClaudeCode: the real Claude Code CLI, as an unprivileged user, writes a
// script, runs it and reads its output through `harvest sim`, then reports;
// its result line carries exactly the usage the script gives, summed over
// the four main-loop turns. Run twice: with non-essential traffic disabled
// (what Harvest will run), and without, so the session-title side request
// Claude Code then makes is answered and counted too.
func TestClaudeCode(t *testing.T) {
	claude := testbin.Claude(t)
	for _, tc := range []struct {
		name  string
		quiet bool
	}{{"quiet", true}, {"side-requests", false}} {
		t.Run(tc.name, func(t *testing.T) { runClaude(t, claude, tc.quiet) })
	}
}

func runClaude(t *testing.T, claude string, quiet bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startSim(ctx, t, examplePath(t, "claude-code.yaml"))
	ws := agentDir(t, "ws")
	home := agentDir(t, "home")

	const key = "sk-ant-harvest-e2e-dummy-key"
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + s.url,
		"ANTHROPIC_API_KEY=" + key,
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_BUG_COMMAND=1",
	}
	if quiet {
		env = append(env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	}
	prompt := "Write a greeting script greet.sh that greets its first argument, run it with the argument harvest saving the output to out.txt, and check the output."
	p := startProcess(t, "claude", true, ws, env, claude,
		"-p", prompt, "--output-format", "stream-json", "--verbose",
		"--permission-mode", "bypassPermissions", "--model", claudeModel)

	var lines []string
	var result *claudeResult
	for result == nil {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				t.Fatalf("claude exited (%v) without a result line; stdout:\n%s\nstderr:\n%s", p.err, strings.Join(lines, "\n"), p.stderr.String())
			}
			lines = append(lines, line)
			var r claudeResult
			if json.Unmarshal([]byte(line), &r) == nil && r.Type == "result" {
				result = &r
			}
		case <-ctx.Done():
			t.Fatalf("claude did not finish: %v; stdout:\n%s\nstderr:\n%s", ctx.Err(), strings.Join(lines, "\n"), p.stderr.String())
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("claude did not exit after its result line")
	}
	if p.err != nil {
		t.Errorf("claude: %v; stderr:\n%s", p.err, p.stderr.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("claude stream-json:\n%s", strings.Join(lines, "\n"))
		}
	})

	// What the tools really did.
	write := s.rule(t, "write-script")
	if got, want := readFile(t, filepath.Join(ws, "greet.sh")), scriptInput(t, write, 0, "content"); got != want {
		t.Errorf("greet.sh = %q, want the scripted %q", got, want)
	}
	if got := readFile(t, filepath.Join(ws, "out.txt")); got != "hello, harvest\n" {
		t.Errorf("out.txt = %q: the Bash tool did not run the script", got)
	}
	if os.Geteuid() == 0 {
		if fi, err := os.Stat(filepath.Join(ws, "greet.sh")); err == nil {
			if uid := fileUID(fi); uid != agentUID {
				t.Errorf("greet.sh is owned by uid %d: claude did not run as %d", uid, agentUID)
			}
		}
	}

	// The conversation the sim saw: the four main-loop turns in order (each
	// rule checks the previous tool's real result), every request answered,
	// the key sent as x-api-key.
	reqs := s.requests(t)
	used, titles := withoutRule(rulesUsed(t, reqs), "title")
	want := []string{"write-script", "run-script", "read-output", "report"}
	if !slices.Equal(used, want) {
		t.Errorf("rules used %q, want %q (title requests: %d)", used, want, titles)
	}
	for _, r := range reqs {
		if r.Path != "/v1/messages" {
			continue
		}
		if got := r.Header.Get("x-api-key"); got != key {
			t.Errorf("request #%d sent x-api-key %q, want %q", r.Seq, got, key)
		}
		if r.Model != claudeModel || !r.Stream {
			t.Errorf("request #%d: model %q stream %t, want %s streamed", r.Seq, r.Model, r.Stream, claudeModel)
		}
	}
	if quiet && titles != 0 {
		t.Errorf("with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, Claude Code still asked for a title %d times", titles)
	}

	// The result line: the scripted answer, and exactly the scripted usage.
	// Claude Code sums the main loop's usage in "usage"; "modelUsage" adds
	// the side requests (the title) for the model.
	report := s.rule(t, "report")
	if result.Subtype != "success" || result.IsError || result.Result != report.Reply.Text || result.NumTurns != 4 {
		t.Errorf("result: subtype %q is_error %t num_turns %d result %q; want success, 4 turns, %q",
			result.Subtype, result.IsError, result.NumTurns, result.Result, report.Reply.Text)
	}
	var main usage
	for _, name := range want {
		main.add(s.rule(t, name))
	}
	got := usage{result.Usage.InputTokens, result.Usage.OutputTokens, result.Usage.CacheReadInputTokens, result.Usage.CacheCreationInputTokens}
	if got != main {
		t.Errorf("result usage %+v, want the script's sum %+v", got, main)
	}
	all := main
	for range titles {
		all.add(s.rule(t, "title"))
	}
	mu, ok := result.ModelUsage[claudeModel]
	if !ok || len(result.ModelUsage) != 1 {
		t.Fatalf("modelUsage %s, want one entry for %s", jsonString(result.ModelUsage), claudeModel)
	}
	if got := (usage{mu.InputTokens, mu.OutputTokens, mu.CacheReadInputTokens, mu.CacheCreationInputTokens}); got != all {
		t.Errorf("modelUsage %+v, want %+v (main loop + %d title requests)", got, all, titles)
	}
}
