package local_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// TestMissingBwrap: one clear error that says how to install it, from both
// Available and Start, and nothing created.
func TestMissingBwrap(t *testing.T) {
	testreq.NeedRoot(t, "the local backend checks root first")
	runDir := testbin.TempDir(t)
	p := local.New(local.Config{RunDir: runDir, AgentBinary: testbin.Agent(t), Bwrap: "/nonexistent/bwrap"})
	for name, err := range map[string]error{
		"Available": p.Available(context.Background()),
		"Start":     startErr(p),
	} {
		var ue *sandbox.UnavailableError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "bubblewrap (/nonexistent/bwrap) not found") || !strings.Contains(err.Error(), "apt-get install -y bubblewrap") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if ents, _ := os.ReadDir(runDir); len(ents) != 0 {
		t.Errorf("a failed start left %d entries in the run dir", len(ents))
	}
}

func startErr(p sandbox.Provider) error {
	sb, err := p.Start(context.Background(), sandbox.Spec{})
	if sb != nil {
		sb.Destroy(context.Background())
	}
	return err
}

// TestMissingAgentBinary: the same for the in-box agent binary.
func TestMissingAgentBinary(t *testing.T) {
	testreq.NeedRoot(t, "the local backend checks root first")
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: "/nonexistent/harvest-agent"})
	err := p.Available(context.Background())
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/harvest-agent") || !strings.Contains(err.Error(), "go install") {
		t.Errorf("Available: %v", err)
	}
}
