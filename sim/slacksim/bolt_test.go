package slacksim_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sim/slacksim"
)

// boltVersion pins Slack's official app framework the faithfulness
// check runs (the newest release when pinned; node 20+).
const boltVersion = "5.1.0"

// installBolt installs @slack/bolt into a temporary directory (npm's
// cache makes a second run offline), or fails where testreq.NPM is
// required, as in CI.
func installBolt(t *testing.T) (node, dir string) {
	t.Helper()
	node, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err1 != nil || err2 != nil {
		testreq.Unavailable(t, testreq.NPM, "node and npm are needed to run @slack/bolt against the stand-in: %v %v", err1, err2)
	}
	dir = t.TempDir()
	install := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--silent", "--prefer-offline", "@slack/bolt@"+boltVersion)
	if out, err := install.CombinedOutput(); err != nil {
		testreq.Unavailable(t, testreq.NPM, "npm install @slack/bolt@%s failed (no registry?): %v\n%s", boltVersion, err, out)
	}
	return node, dir
}

// TestBolt: Slack's own Bolt framework, unchanged, pointed at the
// stand-in (clientOptions.slackApiUrl), in Socket Mode and over HTTP:
// it starts (auth.test, apps.connections.open), receives a mention,
// reacts and replies in the thread, exactly as it would on Slack; the
// reply is in the stand-in's state and every exchange validates.
func TestBolt(t *testing.T) {
	node, dir := installBolt(t)
	script, _ := filepath.Abs("testdata/bolt/app.js")
	for _, mode := range []string{"socket", "http"} {
		t.Run(mode, func(t *testing.T) {
			w := newWorld(t, slacksim.Options{SigningSecret: "bolt-signing-secret"})
			ctx := ctxT(t)
			cmd := exec.CommandContext(ctx, node, script)
			cmd.Env = append(os.Environ(), "BOLT_DIR="+dir, "MODE="+mode, "SLACK_API_URL="+w.srv.APIURL(),
				"SLACK_BOT_TOKEN="+w.tok.Bot, "SLACK_APP_TOKEN="+w.tok.App, "SLACK_SIGNING_SECRET=bolt-signing-secret")
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
			cmd.WaitDelay = 5 * time.Second
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Cancel()
				cmd.Wait()
				if t.Failed() {
					t.Logf("bolt's stderr:\n%s", stderr.String())
				}
			})
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("bolt did not start: %v\n%s", err, stderr.String())
			}
			var ready struct {
				Ready bool
				Port  int
			}
			if err := json.Unmarshal([]byte(line), &ready); err != nil || !ready.Ready {
				t.Fatalf("bolt said %q", line)
			}
			if mode == "http" {
				if err := w.srv.SetRequestURL(fmt.Sprintf("http://127.0.0.1:%d/slack/events", ready.Port)); err != nil {
					t.Fatal(err)
				}
				if err := w.srv.VerifyURL(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				testbin.WaitFor(t, 30*time.Second, "bolt's socket", func() bool { return len(w.srv.Connections()) == 1 })
			}
			m, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: w.mention() + " fix the build"})
			if err != nil {
				t.Fatal(err)
			}
			want := "on it (" + mode + "): " + w.mention() + " fix the build"
			testbin.WaitFor(t, 30*time.Second, "bolt's reply in the thread", func() bool {
				th := w.srv.Thread(w.general.ID, m.TS)
				return len(th) == 2 && th[1].Text == want && th[1].BotID == w.tok.BotID
			})
			if p, _ := w.srv.Message(w.general.ID, m.TS); len(p.Reactions) != 1 || p.Reactions[0].Name != "eyes" {
				t.Errorf("reactions: %+v", p.Reactions)
			}
			es, err := w.srv.WaitEnvelopes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if e.State != slacksim.StateAcked || len(e.Attempts) != 1 {
					t.Errorf("envelope %s: %s after %d attempts", e.Topic, e.State, len(e.Attempts))
				}
			}
			methods, topics := checkExchanges(t, w.srv)
			if !methods["auth.test"] || !methods["chat.postMessage"] || !methods["reactions.add"] || !topics["app.mention"] {
				t.Errorf("exercised %v %v", methods, topics)
			}
			if mode == "socket" && !methods["apps.connections.open"] {
				t.Error("bolt did not open a socket through apps.connections.open")
			}
		})
	}
}
