package cli

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestAuditSetupSecrets: giving a setup script its repository's secrets
// is recorded with their names, never their values.
func TestAuditSetupSecrets(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	auditSetupSecrets(ctx, st, "Octo/Hello", []string{"NPM_TOKEN=canary-npm-1", "GH_TOKEN=canary-gh-2"}, slog.New(slog.DiscardHandler))
	es, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(es) != 1 {
		t.Fatalf("the audit log: %v, %v", es, err)
	}
	e := es[0]
	if e.Action != "secret.read" || e.Channel != store.ChannelServer || e.Target != "repo:octo/hello" || e.Result != store.AuditOK ||
		!strings.Contains(string(e.Detail), `"NPM_TOKEN"`) || !strings.Contains(string(e.Detail), `"GH_TOKEN"`) || strings.Contains(string(e.Detail), "canary") {
		t.Errorf("the entry: %+v %s", e, e.Detail)
	}
}
