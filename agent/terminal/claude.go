package terminal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/sandbox"
)

// claude is what the agent knows and does for Claude Code in interactive
// mode: the files that make it start straight at its prompt and report
// through hooks, and the conversation's identity for --resume.
type claude struct {
	configDir string // CLAUDE_CONFIG_DIR in the box
	hookDir   string
	nonce     string
	mcpConfig string // box path of its --mcp-config ("" none)
	w         *watcher

	mu             sync.Mutex
	sessionID      string // from the hooks, or the state resumed
	transcriptPath string // box path, from the hooks
}

// What Claude Code 2.1.197 needs to start straight at its prompt, found by
// running it on a PTY with each missing in turn (the screen each shows
// instead is in the package doc):
//
//   - $CLAUDE_CONFIG_DIR/.claude.json: hasCompletedOnboarding (else the
//     theme picker and a connectivity check of api.anthropic.com),
//     projects[workdir].hasTrustDialogAccepted (else "Quick safety check:
//     Is this a project you created or one you trust?"),
//     customApiKeyResponses.approved holding the key's last 20 characters
//     (else "Detected a custom API key in your environment ... Do you want to
//     use this API key?", answered No by default);
//   - $CLAUDE_CONFIG_DIR/settings.json: skipDangerousModePermissionPrompt
//     (else "WARNING: Claude Code running in Bypass Permissions mode ... No,
//     exit / Yes, I accept").
func claudeGlobalConfig(workdir, key string) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"hasCompletedOnboarding": true,
		"theme":                  "dark",
		"autoUpdates":            false,
		"customApiKeyResponses":  map[string]any{"approved": []string{keySuffix(key)}, "rejected": []string{}},
		"projects": map[string]any{
			workdir: map[string]any{"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true},
		},
	}, "", "  ")
}

// keySuffix is how Claude Code remembers an approved key: its last 20
// characters.
func keySuffix(k string) string {
	if len(k) > 20 {
		return k[len(k)-20:]
	}
	return k
}

// claudeSettings returns settings.json: the caller's settings (extra) with
// the bypass-permissions dialog accepted and Harvest's hooks added to any
// the caller gave.
func claudeSettings(extra json.RawMessage, hookDir, nonce string) ([]byte, error) {
	s := map[string]any{}
	if len(extra) > 0 {
		if err := json.Unmarshal(extra, &s); err != nil {
			return nil, fmt.Errorf("Config.Settings must be a JSON object (Claude Code's settings.json): %w", err)
		}
	}
	s["skipDangerousModePermissionPrompt"] = true
	hooks, _ := s["hooks"].(map[string]any)
	if hooks == nil {
		if s["hooks"] != nil {
			return nil, fmt.Errorf("Config.Settings: hooks must be an object of event name to matcher groups")
		}
		hooks = map[string]any{}
	}
	for _, ev := range hookEvents {
		group := map[string]any{"hooks": []any{map[string]any{"type": "command", "command": hookCommand(hookDir, nonce, ev)}}}
		switch ev {
		case hookPreToolUse, hookPostToolUse, hookPostToolUseFailure:
			group["matcher"] = "*"
		}
		var groups []any
		if v, ok := hooks[ev]; ok {
			if groups, ok = v.([]any); !ok {
				return nil, fmt.Errorf("Config.Settings: hooks.%s must be a list of matcher groups", ev)
			}
		}
		hooks[ev] = append(groups, group)
	}
	s["hooks"] = hooks
	return json.MarshalIndent(s, "", "  ")
}

// hookCommand is the shell command of one hook (see markers.go).
func hookCommand(dir, nonce, event string) string {
	return fmt.Sprintf(`f=$(mktemp %s) && cat >"$f" && printf '%%s %%s %%s\n' %s %s "$f" >>%s; exit 0`,
		shellQuote(dir+"/h.XXXXXXXX"), nonce, event, shellQuote(dir+"/log"))
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// projectDirName is the directory under $CLAUDE_CONFIG_DIR/projects where
// Claude Code keeps the transcripts of sessions started in dir: every
// UTF-16 unit that is not an ASCII letter or digit becomes '-', and a name
// longer than 200 is cut and suffixed with a hash of dir (its function of
// that name in 2.1.197).
func projectDirName(dir string) string {
	units := utf16.Encode([]rune(dir))
	b := make([]byte, len(units))
	var h int32
	for i, u := range units {
		h = h*31 + int32(u)
		if u < 128 && (u >= 'a' && u <= 'z' || u >= 'A' && u <= 'Z' || u >= '0' && u <= '9') {
			b[i] = byte(u)
		} else {
			b[i] = '-'
		}
	}
	if len(b) <= 200 {
		return string(b)
	}
	abs := int64(h)
	if abs < 0 {
		abs = -abs
	}
	return string(b[:200]) + "-" + strconv.FormatInt(abs, 36)
}

// claudeState is what State saves for Claude Code: the conversation's id
// and its transcript, enough for --resume in a new box.
type claudeState struct {
	Version    int    `json:"version"`
	SessionID  string `json:"session_id"`
	Workdir    string `json:"workdir"`
	Transcript []byte `json:"transcript,omitempty"`
}

// prepare writes Claude Code's configuration, the hook directory and, when
// resuming from a saved state, the transcript where --resume finds it.
func (c *claude) prepare(ctx context.Context, sb *sandbox.Sandbox, cfg *Config, st *claudeState) error {
	global, err := claudeGlobalConfig(cfg.Workdir, cfg.ModelKey)
	if err != nil {
		return err
	}
	settings, err := claudeSettings(cfg.Settings, c.hookDir, c.nonce)
	if err != nil {
		return err
	}
	files := []struct {
		path string
		data []byte
		mode fs.FileMode
	}{
		{c.configDir + "/.claude.json", global, 0o600},
		{c.configDir + "/settings.json", settings, 0o600},
		{c.hookDir + "/log", nil, 0o600},
	}
	if len(cfg.MCP) > 0 {
		b, err := agent.MCPJSON(cfg.MCP, cfg.Workdir)
		if err != nil {
			return err
		}
		c.mcpConfig = c.configDir + "/harvest-mcp.json"
		files = append(files, struct {
			path string
			data []byte
			mode fs.FileMode
		}{c.mcpConfig, b, 0o600})
	}
	if st != nil && st.SessionID != "" && len(st.Transcript) > 0 {
		p := c.configDir + "/projects/" + projectDirName(cfg.Workdir) + "/" + st.SessionID + ".jsonl"
		files = append(files, struct {
			path string
			data []byte
			mode fs.FileMode
		}{p, st.Transcript, 0o600})
		c.sessionID, c.transcriptPath = st.SessionID, p
	}
	for _, f := range files {
		if err := sb.WriteFile(ctx, f.path, f.data, f.mode); err != nil {
			return fmt.Errorf("writing Claude Code's %s in the box: %w", f.path, err)
		}
	}
	return nil
}

func (c *claude) args(cfg *Config) []string {
	args := []string{cfg.CLI, "--permission-mode", "bypassPermissions"}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	if cfg.Instructions != "" {
		args = append(args, "--append-system-prompt", cfg.Instructions)
	}
	if c.mcpConfig != "" {
		args = append(args, "--mcp-config", c.mcpConfig, "--strict-mcp-config")
	}
	c.mu.Lock()
	if c.sessionID != "" {
		args = append(args, "--resume", c.sessionID)
	}
	c.mu.Unlock()
	return args
}

func (c *claude) env(cfg *Config) []string {
	env := []string{
		"CLAUDE_CONFIG_DIR=" + c.configDir,
		"ANTHROPIC_BASE_URL=" + cfg.ModelURL,
		"ANTHROPIC_API_KEY=" + cfg.ModelKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_BUG_COMMAND=1",
	}
	return append(env, cfg.Env...)
}

// noteSession records the conversation a hook reports.
func (c *claude) noteSession(ev hookEvent) {
	if ev.SessionID == "" {
		return
	}
	c.mu.Lock()
	c.sessionID = ev.SessionID
	if ev.TranscriptPath != "" {
		c.transcriptPath = ev.TranscriptPath
	}
	c.mu.Unlock()
}

// forgetSession drops the conversation (its transcript could not be
// resumed): the next start is a fresh one.
func (c *claude) forgetSession() {
	c.mu.Lock()
	c.sessionID, c.transcriptPath = "", ""
	c.mu.Unlock()
}

func (c *claude) session() (id, transcript string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID, c.transcriptPath
}

// state reads the transcript and returns the state to save (nil before the
// first conversation).
func (c *claude) state(ctx context.Context, sb *sandbox.Sandbox, workdir string) ([]byte, error) {
	id, path := c.session()
	if id == "" {
		return nil, nil
	}
	st := claudeState{Version: 1, SessionID: id, Workdir: workdir}
	if path != "" {
		data, err := sb.ReadFile(ctx, path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading Claude Code's transcript %s: %w", path, err)
		}
		st.Transcript = data
	}
	return json.Marshal(st)
}

func parseClaudeState(b []byte) (*claudeState, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var st claudeState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("the saved state is not a terminal agent's Claude Code state: %w", err)
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("saved state version %d: this Harvest reads version 1", st.Version)
	}
	return &st, nil
}
