package agents

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
)

// TestConformance runs the agent conformance suite (agenttest) for every
// registered kind on every backend it runs on, each built through Open as
// a session builds it.
func TestConformance(t *testing.T) {
	for _, backend := range []string{"local", "docker"} {
		for _, k := range Kinds() {
			if CheckBackend(k, backend) != nil {
				continue
			}
			t.Run(k.Name+"/"+backend, func(t *testing.T) {
				prefix := cliPrefixFor(t, k)
				var p sandbox.Provider
				if backend == "docker" {
					p = dockerProvider(t)
				} else {
					p = agenttest.Provider(t)
				}
				n := 0
				agenttest.RunConformance(t, agenttest.Subject{
					Provider: p,
					Mounts:   Mounts(k, prefix),
					Open: func(ctx context.Context, box *sandbox.Sandbox, simURL, key string, state []byte) (agent.Agent, error) {
						n++
						return Open(ctx, Request{
							Kind: k.Name, Box: box, Workspaces: []agent.Workspace{{Name: "repo", Path: box.WorkspacePath("repo")}},
							Model: "anthropic/claude-sonnet-4-5", ModelExplicit: true,
							Models: providers.Config{
								Endpoints: map[string]providers.Endpoint{"anthropic": {API: "anthropic", BaseURL: simURL, APIKey: key}},
								Retry:     llm.RetryPolicy{MaxAttempts: 1},
							},
							CLIPrefix: prefix, SessionID: fmt.Sprintf("s-conformance-%s-%d", k.Name, n), State: state,
						})
					},
				})
			})
		}
	}
}

// cliPrefixFor is the npm prefix of k's CLI, checked to be installed (the
// test skips, or fails where the CLIs are required, when it is not).
func cliPrefixFor(t *testing.T, k agent.Kind) string {
	var cli string
	switch k.Caps.CLI {
	case "":
		return DefaultCLIPrefix
	case "opencode":
		cli = testbin.OpenCode(t)
	default:
		cli = testbin.Claude(t)
	}
	return strings.TrimSuffix(cli, "/node_modules/.bin/"+k.Caps.CLI)
}

func dockerProvider(t *testing.T) sandbox.Provider {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "info").Run(); err != nil {
		testreq.Unavailable(t, testreq.Docker, "no docker: docker info: %v", err)
	}
	p := docker.New(docker.Config{Image: testbin.DockerImage(), RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	t.Cleanup(func() { p.Close() })
	return p
}
