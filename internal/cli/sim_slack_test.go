package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// TestSimSlackBadInput: each mistake is one clear line and exit 2 (1 when
// serving fails).
func TestSimSlackBadInput(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim", "slack", "--ack-timeout", "0s"}, 2, "--ack-timeout 0s: must be positive"},
		{[]string{"sim", "slack", "--request-url", "example.com/events"}, 2, `--request-url "example.com/events": give an http or https URL`},
		{[]string{"sim", "slack", "--signing-secret", "x"}, 2, "--signing-secret needs --request-url"},
		{[]string{"sim", "slack", "--command-url", "http://127.0.0.1:1/c"}, 2, "--command-url needs --request-url"},
		{[]string{"sim", "slack", "--request-url", "http://127.0.0.1:1/e", "--interactivity-url", "x"}, 2, `--interactivity-url "x": give an http or https URL`},
		{[]string{"sim", "slack", "--user", "=a@b.c"}, 2, `--user "=a@b.c": want NAME or NAME=EMAIL`},
		{[]string{"sim", "slack", "--user", "al ice"}, 2, `--user: user name "al ice": give a handle without spaces`},
		{[]string{"sim", "slack", "--user", "alice=nope"}, 2, `--user: user alice: email "nope" is not an address`},
		{[]string{"sim", "slack", "--channel", "Big Room"}, 2, `--channel: channel name "Big Room": lower case`},
		{[]string{"sim", "slack", "--listen", busy.Addr().String()}, 1, "--listen " + busy.Addr().String() + ":"},
		{[]string{"sim", "slack", "extra"}, 2, `unknown command "extra" for "harvest sim slack"`},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("harvest %s:\n  exit %d, want %d\n  stderr %q\n  want it to contain %q", strings.Join(c.args, " "), code, c.code, stderr, c.want)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("harvest %s: more than one error line:\n%s", strings.Join(c.args, " "), stderr)
		}
	}
}

// TestSimSlackBinary: the command prints the tokens and ids, answers
// auth.test to the bot token, acts as a person through the control API
// (a mention waits for a Socket Mode connection), and exits 0 on
// SIGTERM.
func TestSimSlackBinary(t *testing.T) {
	cmd := exec.Command(testbin.Harvest(t), "sim", "slack", "--quiet", "--user", "alice=alice@example.com", "--channel", "dev")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := bufio.NewReader(out)
	fields := map[string]string{}
	var base, printed string
	for base == "" {
		line, err := lines.ReadString('\n')
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v; stdout %q; stderr:\n%s", err, printed, stderr.String())
		}
		printed += line
		line = strings.TrimSpace(line)
		if u, ok := strings.CutPrefix(line, "harvest sim slack listening on "); ok {
			base = u
		}
		for _, p := range []string{"bot token ", "user alice ", "channel #dev "} {
			if v, ok := strings.CutPrefix(line, p); ok {
				fields[p] = v
			}
		}
	}
	go func() {
		io.Copy(io.Discard, lines)
		done <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	alice := strings.Fields(fields["user alice "])
	if !strings.HasPrefix(fields["bot token "], "xoxb-") || len(alice) != 2 || alice[1] != "alice@example.com" || fields["channel #dev "] == "" {
		t.Fatalf("stdout:\n%s", printed)
	}
	req, _ := http.NewRequest("POST", base+"/api/auth.test", nil)
	req.Header.Set("Authorization", "Bearer "+fields["bot token "])
	var auth struct {
		OK     bool   `json:"ok"`
		UserID string `json:"user_id"`
	}
	if err := getJSON(req, &auth); err != nil || !auth.OK {
		t.Fatalf("auth.test: %+v %v", auth, err)
	}
	body := `{"user": "` + alice[0] + `", "channel": "` + fields["channel #dev "] + `", "text": "<@` + auth.UserID + `> hi"}`
	req, _ = http.NewRequest("POST", base+"/_sim/slack/messages", strings.NewReader(body))
	var msg struct{ TS string }
	if err := getJSON(req, &msg); err != nil || msg.TS == "" {
		t.Fatalf("post: %+v %v", msg, err)
	}
	req, _ = http.NewRequest("GET", base+"/_sim/slack/envelopes", nil)
	var envs []struct{ Topic, State string }
	if err := getJSON(req, &envs); err != nil || len(envs) != 2 || envs[1].Topic != "app.mention" || envs[1].State != "waiting" {
		t.Fatalf("envelopes: %+v %v", envs, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("exit: %v\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("did not exit after SIGTERM")
	}
}

func getJSON(req *http.Request, v any) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
