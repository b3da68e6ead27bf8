package cli

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/wire"
)

// TestUserCommands: harvest user adds a user, harvest token create --user
// gives them a token that is theirs, set-role and disable change them at
// once (disabled, the token is refused), and harvest audit shows those
// changes as the CLI's; the same commands work on the data directory.
func TestUserCommands(t *testing.T) {
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
	ctx := context.Background()

	id := strings.TrimSpace(cli("user", "add", "Carol Martin", "--role", "member"))
	if !strings.HasPrefix(id, "usr-") {
		t.Fatalf("harvest user add printed %q, want the user's id", id)
	}
	secret := strings.TrimSpace(cli("token", "create", "carol-laptop", "--user", id))
	carol, err := client.New(s.url, secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	if me, err := carol.Me(ctx); err != nil || me.User == nil || me.User.ID != id || me.User.Name != "Carol Martin" {
		t.Fatalf("carol's /v1/me: %+v, %v", me, err)
	}
	if out := cli("user", "ls"); !strings.Contains(out, id) || !strings.Contains(out, "Carol Martin") || !strings.Contains(out, "admin") {
		t.Errorf("harvest user ls:\n%s", out)
	}
	if out := cli("token", "ls", "--user", id); !strings.Contains(out, "carol-laptop") || strings.Contains(out, "admin  ") {
		t.Errorf("harvest token ls --user:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "", "token", "create", "carol-root", "--admin", "--user", id); code == 0 || !strings.Contains(errOut, "only an admin's token") {
		t.Errorf("an admin token for a member: exit %d %s", code, errOut)
	}

	cli("user", "set-role", id, "viewer")
	if me, err := carol.Me(ctx); err != nil || me.User.Role != wire.RoleViewer {
		t.Errorf("after set-role viewer: %+v, %v", me, err)
	}
	cli("user", "disable", id)
	if _, err := carol.Me(ctx); client.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("a disabled user's token: %v, want 401", err)
	}

	out := cli("audit", "--action", "user.update")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "cli") || !strings.Contains(lines[0], id) || !strings.Contains(lines[0], `"disabled":true`) {
		t.Errorf("harvest audit --action user.update:\n%s", out)
	}
	if out := cli("audit", "--json", "--action", "token.create"); !strings.Contains(out, `"channel":"cli"`) || !strings.Contains(out, `"result":"ok"`) {
		t.Errorf("harvest audit --json --action token.create:\n%s", out)
	}

	// On the data directory, beside the running server (SQLite).
	t.Setenv("HARVEST_SERVER", "")
	cli("user", "enable", "--data", e.home, id)
	if _, err := carol.Me(ctx); err != nil {
		t.Errorf("enabled on the data directory: %v", err)
	}
	if out := cli("audit", "--data", e.home, "--action", "user.update"); !strings.Contains(out, "the data directory") {
		t.Errorf("the local change's audit entry:\n%s", out)
	}
}
