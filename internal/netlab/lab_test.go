package netlab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/netlab"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/wire"
)

// startSim serves harvest sim playing script where the lab's nodes reach
// it (the test process's address on the bridge) and returns its URL.
func startSim(t *testing.T, lab *netlab.Lab, script string) string {
	t.Helper()
	sc, err := sim.ParseScript("script.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(sim.New(sc))
	hs.Listener.Close()
	hs.Listener = lab.Listen()
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL
}

// startNodes starts harvest serve on n nodes of lab named a, b, c...,
// on the lab's PostgreSQL and NATS, the sim as their model.
func startNodes(t *testing.T, lab *netlab.Lab, simURL string, n int, args ...string) []*netlab.Node {
	t.Helper()
	// Separate machines carry workspaces through an S3 bucket.
	cpArgs, cpEnv := lab.CheckpointArgs()
	env := append([]string{"ANTHROPIC_API_KEY=sk-test", "ANTHROPIC_BASE_URL=" + simURL, "HARVEST_MODEL=anthropic/claude-sonnet-4-5"}, cpEnv...)
	var nodes []*netlab.Node
	for i := range n {
		name := string(rune('a' + i))
		node := lab.AddNode(name)
		node.Start(env, append(append([]string{"--node-id", name, "--pool", "0", "--nats", lab.NATSURL()}, cpArgs...), args...)...)
		nodes = append(nodes, node)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, node := range nodes {
				t.Logf("%s, the last %d lines of its log:\n%s", node, logTail, tail(node.Stderr.String(), logTail))
			}
		}
	})
	return nodes
}

// logTail is how many lines of each node's log a failed test prints: CI
// shows the end of the output, and whole logs of three nodes pushed the
// failure's own message out of it.
const logTail = 25

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// createSession creates a session through c, retrying while the node
// answers 503 (a loaded machine can take a store call past the nodes'
// --store-timeout; the API says so with a 503 and Retry-After, and a
// client tries again, as this one does for up to a minute).
func createSession(t *testing.T, ctx context.Context, c *client.Client, req wire.CreateRequest) *wire.View {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		v, err := c.CreateSession(ctx, req)
		var ce *client.Error
		if err == nil || !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable {
			if err != nil {
				t.Fatalf("creating a session: %v", err)
			}
			return v
		}
		t.Logf("creating a session: %v; again in a second", err)
		select {
		case <-ctx.Done():
			t.Fatalf("creating a session: %v, and still so after a minute", err)
		case <-time.After(time.Second):
		}
	}
}

// healthz asks a node's /healthz through client (nil: from the test
// process), within d.
func healthz(ctx context.Context, node *netlab.Node, from *netlab.Node, d time.Duration) error {
	tr := &http.Transport{DisableKeepAlives: true}
	if from != nil {
		tr.DialContext = from.DialContext
	}
	c := &http.Client{Transport: tr, Timeout: d}
	resp, err := c.Get(node.URL + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// pgFrom connects to the lab's PostgreSQL from inside node, within d, and
// runs a query there.
func pgFrom(ctx context.Context, lab *netlab.Lab, node *netlab.Node, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cfg, err := pgx.ParseConfig(lab.StoreURL())
	if err != nil {
		return err
	}
	cfg.DialFunc = node.DialContext
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// TestNodesAreSeparate: each node sees its own data directory, /tmp and
// /run/harvest, not another's, and its own processes alone; the nodes,
// PostgreSQL and NATS reach each other over the bridge; PostgreSQL is
// on no address of the test process's namespace.
func TestNodesAreSeparate(t *testing.T) {
	lab := netlab.New(t)
	simURL := startSim(t, lab, helloScript)
	nodes := startNodes(t, lab, simURL, 2, "--lease-ttl=3s")
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	marker := filepath.Join(b.Dir, "tmp", "b-was-here")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	in := func(n *netlab.Node, script string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "nsenter", "--target="+strconv.Itoa(n.Pid()), "--mount", "--pid", "--net", "--", "/bin/sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("in %s: %s: %v\n%s", n, script, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := in(a, "ls "+filepath.Dir(a.Dir)); got != "a" {
		t.Errorf("node a sees the nodes %q, want only itself", got)
	}
	if got := in(a, "ls /tmp; ls /run/harvest"); strings.Contains(got, "b-was-here") {
		t.Errorf("node a sees node b's /tmp: %q", got)
	}
	if got := in(b, "ls /tmp"); !strings.Contains(got, "b-was-here") {
		t.Errorf("node b does not see its own /tmp: %q", got)
	}
	if _, err := os.Stat(filepath.Join(a.DataDir, "admin-token")); err != nil {
		t.Errorf("node a's data directory, seen from the test: %v", err)
	}
	if got := in(a, "ls /proc | grep -c '^[0-9]'"); got == "" {
		t.Errorf("node a lists no processes")
	} else if n, _ := strconv.Atoi(got); n > 20 {
		t.Errorf("node a sees %d processes: its PID namespace is not its own", n)
	}
	if err := healthz(ctx, b, a, 5*time.Second); err != nil {
		t.Errorf("node a does not reach node b: %v", err)
	}
	if err := pgFrom(ctx, lab, a, 10*time.Second); err != nil {
		t.Errorf("node a does not reach PostgreSQL: %v", err)
	}
	var d net.Dialer
	if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(netlab.PostgresPort))); err == nil {
		c.Close()
		t.Errorf("PostgreSQL answers on this namespace's loopback: it is not in the lab's namespace alone")
	}
	if err := errors.Join(healthz(ctx, a, nil, 5*time.Second), healthz(ctx, b, nil, 5*time.Second)); err != nil {
		t.Errorf("the test process does not reach the nodes: %v", err)
	}
}

// helloScript answers any message with "hello".
const helloScript = `
rules:
  - name: hello
    reply: {text: "hello", usage: {input_tokens: 10, output_tokens: 1}}
`
