package agents

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/terminal"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
)

// An image without the CLI's program interpreter (a musl or bare image;
// npm installs glibc builds) is refused at Open with what is missing and
// what to use instead, before any bridge or CLI starts — not left to a
// bare "no such file or directory" from the exec.
func TestOpenRefusesAnImageWithoutTheLoader(t *testing.T) {
	testreq.NeedRoot(t, "docker")
	claude := testbin.Claude(t)
	prefix := strings.TrimSuffix(claude, "/node_modules/.bin/claude")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "info").Run(); err != nil {
		testreq.Unavailable(t, testreq.Docker, "no docker: docker info: %v", err)
	}

	// A glibc-less image: the directories the docker backend binds into, and
	// nothing else.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, d := range []string{"workspace", ".harvest", ".harvest/bin", ".harvest/run", "tmp", "home", "home/user"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755})
	}
	tw.Close()
	image := fmt.Sprintf("harvest-test/no-loader:%d", os.Getpid())
	imp := exec.CommandContext(ctx, "docker", "import", "--change", "USER 1000:1000", "-", image)
	imp.Stdin = &tb
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "image", "rm", "-f", image).Run() })

	p := docker.New(docker.Config{Image: image, RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	sb, err := p.Start(ctx, sandbox.Spec{User: sandbox.User{UID: 1000, GID: 1000}, Mounts: Mounts(claudecode.Kind, prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	models := providers.Config{Endpoints: map[string]providers.Endpoint{"anthropic": {BaseURL: "http://127.0.0.1:9", APIKey: "sk-unused"}}}
	interp, err := elfInterpreter(claude)
	if err != nil || interp == "" {
		t.Fatalf("%s: program interpreter %q, %v", claude, interp, err)
	}
	for _, kind := range []string{claudecode.Kind.Name, terminal.Kind.Name} {
		_, err = Open(ctx, Request{Kind: kind, Box: sb, Workspaces: []agent.Workspace{{Name: "tmp", Path: "/tmp"}}, CLIPrefix: prefix,
			Model: "anthropic/claude-sonnet-4-5", Models: models, SessionID: "s-1"})
		if err == nil || !strings.Contains(err.Error(), "program interpreter "+interp) || !strings.Contains(err.Error(), "glibc image") {
			t.Errorf("%s in an image without the loader: %v", kind, err)
		}
	}
	if info, err := sb.Info(ctx); err != nil || info.Listeners != 0 {
		t.Errorf("the refusals left %d listeners in the box (%v): nothing should have started", info.Listeners, err)
	}
}
