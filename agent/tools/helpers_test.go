package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

// testBox is a real local sandbox with one workspace, "w", at /workspace/w,
// and an Env on it. Tests set files up through the sandbox (never through
// the host directory), like the tools themselves.
type testBox struct {
	sb  *sandbox.Sandbox
	env *Env
	reg *Registry
}

const ws = "/workspace/w"

func newBox(t testing.TB, cfg Config) *testBox {
	t.Helper()
	p := agenttest.Provider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := p.Start(ctx, sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: "w", HostPath: testbin.Workspace(t, 1000, 1000)}}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := NewEnv(sb, cfg)
	if err != nil {
		sb.Destroy(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := env.Close(ctx); err != nil {
			t.Errorf("closing the env: %v", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroying the box: %v", err)
		}
	})
	return &testBox{sb: sb, env: env, reg: Default()}
}

// call runs a tool with input (a JSON string, or a value to marshal).
func (b *testBox) call(t testing.TB, name string, input any) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return b.callCtx(ctx, t, name, input)
}

func (b *testBox) callCtx(ctx context.Context, t testing.TB, name string, input any) Result {
	t.Helper()
	var raw json.RawMessage
	switch v := input.(type) {
	case string:
		raw = json.RawMessage(v)
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	return b.reg.Run(ctx, b.env, name, raw)
}

// sh runs a shell script in the box and returns its output; it must succeed.
func (b *testBox) sh(t testing.TB, script string) string {
	t.Helper()
	out, code := b.shCode(t, script)
	if code != 0 {
		t.Fatalf("%q exited %d:\n%s", script, code, out)
	}
	return out
}

func (b *testBox) shCode(t testing.TB, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	st, err := b.sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Dir: ws, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("running %q: %v", script, err)
	}
	return out.String(), st.ShellCode()
}

func (b *testBox) write(t testing.TB, path, content string) {
	t.Helper()
	if err := b.sb.WriteFile(context.Background(), path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *testBox) readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := b.sb.ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func (b *testBox) exists(t testing.TB, path string) bool {
	t.Helper()
	_, code := b.shCode(t, "test -e "+shellQuote(path))
	return code == 0
}

func wantOK(t testing.TB, r Result, subs ...string) {
	t.Helper()
	if r.IsError {
		t.Fatalf("unexpected error result:\n%s", r.Output)
	}
	wantIn(t, r, subs...)
}

func wantErr(t testing.TB, r Result, subs ...string) {
	t.Helper()
	if !r.IsError {
		t.Fatalf("expected an error result, got:\n%s", r.Output)
	}
	wantIn(t, r, subs...)
}

func wantDenied(t testing.TB, r Result, subs ...string) {
	t.Helper()
	if !r.Denied || !r.IsError {
		t.Fatalf("expected a denial, got (error=%v):\n%s", r.IsError, r.Output)
	}
	wantIn(t, r, subs...)
}

func wantIn(t testing.TB, r Result, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(r.Output, s) {
			t.Errorf("output does not contain %q:\n%s", s, r.Output)
		}
	}
}
