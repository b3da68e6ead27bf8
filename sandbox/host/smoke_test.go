package host_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/host"
)

func TestSmoke(t *testing.T) {
	p := host.New(host.Config{AllowUnsafe: true, RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := p.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	var out, errb bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo hello; echo err >&2; exit 3"}, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 3 || strings.TrimSpace(out.String()) != "hello" || strings.TrimSpace(errb.String()) != "err" {
		t.Fatalf("got %v %q %q", st, out.String(), errb.String())
	}
	t0 := time.Now()
	for i := 0; i < 100; i++ {
		if _, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("100 x true: %v", time.Since(t0))
}
