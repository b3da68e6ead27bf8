package clis

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// ocEvent is one event of OpenCode's GET /event stream.
type ocEvent struct {
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
}

// ocMessage is one entry of GET /session/{id}/message.
type ocMessage struct {
	Info struct {
		Role   string `json:"role"`
		Finish string `json:"finish"`
		Tokens struct {
			Input  int `json:"input"`
			Output int `json:"output"`
			Cache  struct {
				Read  int `json:"read"`
				Write int `json:"write"`
			} `json:"cache"`
		} `json:"tokens"`
		Error json.RawMessage `json:"error"`
	} `json:"info"`
	Parts []struct {
		Type  string `json:"type"`
		Text  string `json:"text"`
		Tool  string `json:"tool"`
		State struct {
			Status string          `json:"status"`
			Input  json.RawMessage `json:"input"`
			Output string          `json:"output"`
		} `json:"state"`
	} `json:"parts"`
}

const ocModel = "sim-coder"

// TestOpenCode: the real OpenCode server, configured with an
// OpenAI-compatible provider whose baseURL is `harvest sim`, is driven
// through its HTTP API (create a session, prompt it, wait for the turn on
// its event stream): it writes a script, runs it, reads its output and
// answers, each step checked by the sim against the previous tool's result.
func TestOpenCode(t *testing.T) {
	opencode := testbin.OpenCode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startSim(ctx, t, examplePath(t, "opencode.yaml"))
	ws := agentDir(t, "ws")
	home := agentDir(t, "home")

	const key = "sk-harvest-e2e-dummy-key"
	config := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{
			"sim": map[string]any{
				"npm":  "@ai-sdk/openai-compatible",
				"name": "Harvest sim",
				"options": map[string]any{
					"baseURL": s.url + "/v1",
					"apiKey":  key,
				},
				"models": map[string]any{ocModel: map[string]any{"name": "Sim coder", "tool_call": true}},
			},
		},
		"model":       "sim/" + ocModel,
		"small_model": "sim/" + ocModel,
		"autoupdate":  false,
		"share":       "disabled",
		"permission":  map[string]any{"edit": "allow", "bash": "allow", "webfetch": "deny"},
	}
	cfgPath := filepath.Join(testbin.TempDir(t), "opencode.json")
	cfg, _ := json.MarshalIndent(config, "", "  ")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"OPENCODE_CONFIG=" + cfgPath,
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_SHARE=1",
		// At start OpenCode npm-installs @opencode-ai/plugin into its config
		// dir; it works without it. Keep the test off the network.
		"npm_config_registry=http://127.0.0.1:9/",
		"npm_config_offline=true",
	}
	p := startProcess(t, "opencode serve", true, ws, env, opencode, "serve", "--hostname", "127.0.0.1", "--port", "0")
	base := strings.TrimPrefix(p.waitLine(ctx, t, "opencode server listening on "), "opencode server listening on ")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("opencode stderr:\n%s", p.stderr.String())
		}
	})

	events := subscribe(ctx, t, base+"/event")
	waitEvent(ctx, t, events, func(e ocEvent) bool { return e.Type == "server.connected" })

	var session struct {
		ID string `json:"id"`
	}
	post(ctx, t, base+"/session", map[string]any{}, http.StatusOK, &session)
	prompt := "Write a greeting script greet.sh that greets its first argument, run it with the argument harvest saving the output to out.txt, and check the output."
	post(ctx, t, base+"/session/"+session.ID+"/prompt_async",
		map[string]any{"parts": []map[string]any{{"type": "text", "text": prompt}}}, http.StatusNoContent, nil)

	// The turn is over when the session goes idle; an error or a permission
	// prompt (nobody would answer it) ends the test at once.
	waitEvent(ctx, t, events, func(e ocEvent) bool {
		var prop struct {
			SessionID string          `json:"sessionID"`
			Error     json.RawMessage `json:"error"`
		}
		json.Unmarshal(e.Properties, &prop)
		switch {
		case prop.SessionID != session.ID:
			return false
		case e.Type == "session.error":
			t.Fatalf("opencode session error: %s", prop.Error)
		case strings.HasPrefix(e.Type, "permission."):
			t.Fatalf("opencode asked for a permission: %s %s", e.Type, e.Properties)
		}
		return e.Type == "session.idle"
	})

	var msgs []ocMessage
	get(ctx, t, base+"/session/"+session.ID+"/message", &msgs)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := json.MarshalIndent(msgs, "", "  ")
			t.Logf("opencode messages:\n%s", b)
		}
	})

	// The tools ran, in order, and succeeded; the last text is the
	// scripted answer.
	var tools []string
	var lastText string
	for _, m := range msgs {
		if len(m.Info.Error) > 0 && string(m.Info.Error) != "null" {
			t.Errorf("message error: %s", m.Info.Error)
		}
		for _, part := range m.Parts {
			switch part.Type {
			case "tool":
				tools = append(tools, part.Tool)
				if part.State.Status != "completed" {
					t.Errorf("tool %s: %s: %s", part.Tool, part.State.Status, part.State.Output)
				}
			case "text":
				if m.Info.Role == "assistant" {
					lastText = part.Text
				}
			}
		}
	}
	if want := []string{"write", "bash", "read"}; !slices.Equal(tools, want) {
		t.Errorf("tools run %q, want %q", tools, want)
	}
	report := s.rule(t, "report")
	if lastText != report.Reply.Text {
		t.Errorf("final answer %q, want %q", lastText, report.Reply.Text)
	}
	write := s.rule(t, "write-script")
	if got, want := readFile(t, filepath.Join(ws, "greet.sh")), scriptInput(t, write, 0, "content"); got != want {
		t.Errorf("greet.sh = %q, want the scripted %q", got, want)
	}
	if got := readFile(t, filepath.Join(ws, "out.txt")); got != "hello, harvest\n" {
		t.Errorf("out.txt = %q: the bash tool did not run the script", got)
	}

	// The sim saw the four main-loop turns in order (the title request runs
	// alongside), every request with the configured key.
	reqs := s.requests(t)
	used, titles := withoutRule(rulesUsed(t, reqs), "title")
	if want := []string{"write-script", "run-script", "read-output", "report"}; !slices.Equal(used, want) {
		t.Errorf("rules used %q, want %q", used, want)
	}
	if titles != 1 {
		t.Errorf("%d title requests, want 1", titles)
	}
	for _, r := range reqs {
		if got := r.Header.Get("Authorization"); got != "Bearer "+key {
			t.Errorf("request #%d sent Authorization %q", r.Seq, got)
		}
		if r.Model != ocModel || !r.Stream {
			t.Errorf("request #%d: model %q stream %t", r.Seq, r.Model, r.Stream)
		}
	}

	// OpenCode records each step's usage from the final usage chunk: input
	// excludes the cached prompt tokens, which it counts as cache reads.
	var steps []ocMessage
	for _, m := range msgs {
		if m.Info.Role == "assistant" {
			steps = append(steps, m)
		}
	}
	if len(steps) > 0 {
		last := steps[len(steps)-1].Info.Tokens
		var want usage
		want.add(report)
		if got := (usage{last.Input, last.Output, last.Cache.Read, last.Cache.Write}); got != want {
			t.Errorf("the last step's tokens %+v, want the scripted %+v", got, want)
		}
	}
}

// subscribe reads an SSE stream in a goroutine the test owns (it ends when
// ctx does, and cleanup waits for it) and delivers its events.
func subscribe(ctx context.Context, t *testing.T, url string) <-chan ocEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	ch := make(chan ocEvent, 256)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e ocEvent
			if json.Unmarshal([]byte(data), &e) != nil {
				continue
			}
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return ch
}

// waitEvent reads events until done returns true.
func waitEvent(ctx context.Context, t *testing.T, events <-chan ocEvent, done func(ocEvent) bool) {
	t.Helper()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the opencode event stream ended")
			}
			if done(e) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("waiting for an opencode event: %v", ctx.Err())
		}
	}
}

func post(ctx context.Context, t *testing.T, url string, body any, wantStatus int, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	do(t, req, wantStatus, out)
}

func get(ctx context.Context, t *testing.T, url string, out any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	do(t, req, http.StatusOK, out)
}

func do(t *testing.T, req *http.Request, wantStatus int, out any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s %s: %d, want %d: %s", req.Method, req.URL, resp.StatusCode, wantStatus, buf.String())
	}
	if out != nil {
		if err := json.Unmarshal(buf.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v: %s", req.Method, req.URL, err, fmt.Sprintf("%.500s", buf.String()))
		}
	}
}
