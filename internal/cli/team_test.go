package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTeamCommands: harvest team makes a team, puts users in it, lists it,
// takes them out and deletes it, through the API and on the data
// directory; a bad name or a missing user fails saying so; harvest audit
// shows the changes as the CLI's.
func TestTeamCommands(t *testing.T) {
	e := newServeEnv(t)
	s := e.start()
	tok, err := os.ReadFile(filepath.Join(e.home, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HARVEST_SERVER", s.url)
	t.Setenv("HARVEST_TOKEN", strings.TrimSpace(string(tok)))
	cli := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, "", args...)
		if code != 0 {
			t.Fatalf("harvest %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	ann := strings.TrimSpace(cli("user", "add", "Ann"))
	ben := strings.TrimSpace(cli("user", "add", "Ben", "--role", "viewer"))

	cli("team", "add", "backend")
	cli("team", "add-member", "backend", ann, ben)
	if out := cli("team", "ls"); !strings.Contains(out, "backend") || !strings.Contains(out, ann) || !strings.Contains(out, ben) {
		t.Errorf("harvest team ls:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "", "team", "add", "Back End"); code != 2 || !strings.Contains(errOut, "lower-case letters") {
		t.Errorf("a bad team name: exit %d %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "team", "add-member", "backend", "usr-nobody"); code == 0 || !strings.Contains(errOut, "usr-nobody") {
		t.Errorf("a missing user: exit %d %s", code, errOut)
	}
	cli("team", "rm-member", "backend", ben)
	if out := cli("team", "ls", "--json"); !strings.Contains(out, ann) || strings.Contains(out, ben) {
		t.Errorf("harvest team ls --json after rm-member:\n%s", out)
	}
	if out := cli("audit", "--action", "team.add_member"); strings.Count(out, "cli") < 2 || !strings.Contains(out, "backend") {
		t.Errorf("harvest audit --action team.add_member:\n%s", out)
	}

	// On the data directory, beside the running server (SQLite).
	t.Setenv("HARVEST_SERVER", "")
	cli("team", "add", "--data", e.home, "qa")
	cli("team", "add-member", "--data", e.home, "qa", ben)
	if out := cli("team", "ls", "--data", e.home); !strings.Contains(out, "qa") || !strings.Contains(out, ben) {
		t.Errorf("harvest team ls --data:\n%s", out)
	}
	cli("team", "budget", "set", "--data", e.home, "qa", "--daily-usd", "3", "--max-sessions", "4")
	if out := cli("team", "budget", "show", "--data", e.home, "qa"); !strings.Contains(out, "of $3.00 today") || !strings.Contains(out, "live sessions: 0 of 4") {
		t.Errorf("harvest team budget show --data:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "", "team", "budget", "set", "--data", e.home, "nope", "--daily-usd", "1"); code == 0 || !strings.Contains(errOut, "team nope") {
		t.Errorf("a budget for a missing team: exit %d %s", code, errOut)
	}
	cli("team", "rm", "--data", e.home, "backend")
	t.Setenv("HARVEST_SERVER", s.url)
	if out := cli("team", "ls"); strings.Contains(out, "backend") || !strings.Contains(out, "qa") {
		t.Errorf("the server's teams after the data directory's changes:\n%s", out)
	}
	if out := cli("team", "budget", "show", "qa", "--json"); !strings.Contains(out, `"daily_usd": 3`) || !strings.Contains(out, `"set": true`) {
		t.Errorf("the server's budget of qa after the data directory's change:\n%s", out)
	}
	if out := cli("audit", "--action", "budget.set"); !strings.Contains(out, "team:qa") {
		t.Errorf("harvest audit --action budget.set:\n%s", out)
	}
}
