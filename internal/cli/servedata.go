package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
)

// The data directory harvest serve keeps its state in, and the admin token
// a first start makes there.

// serverDataDir is harvest serve's data directory: the flag, else
// $HARVEST_HOME, else ~/.harvest.
func serverDataDir(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	if d := os.Getenv("HARVEST_HOME"); d != "" {
		return filepath.Abs(d)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the data directory: set HARVEST_HOME or pass --data (%v)", err)
	}
	return filepath.Join(home, ".harvest"), nil
}

// ensureAdminToken makes sure DATA/admin-token holds the secret of an admin
// token in the store: it creates both on first start, and remakes them if
// the file is gone or names no token (a new database).
func ensureAdminToken(ctx context.Context, st store.Store, data string) (path string, created bool, err error) {
	path = filepath.Join(data, adminTokenFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		secret := string(bytes.TrimSpace(b))
		t, err := st.TokenByHash(ctx, server.HashToken(secret))
		if err == nil && t.Admin {
			return path, false, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return path, false, fmt.Errorf("checking the admin token of %s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return path, false, fmt.Errorf("reading the admin token: %w", err)
	}
	secret, t := server.NewToken("admin", true, time.Now())
	if err := st.CreateToken(ctx, t); err != nil {
		return path, false, fmt.Errorf("creating the admin token: %w", err)
	}
	tmp, err := os.CreateTemp(data, ".admin-token-*")
	if err != nil {
		return path, false, fmt.Errorf("writing the admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err = tmp.Chmod(0o600); err == nil {
		_, err = tmp.WriteString(secret + "\n")
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
	}
	if err != nil {
		return path, false, fmt.Errorf("writing the admin token to %s: %w", path, err)
	}
	return path, true, nil
}

// auditSetupSecrets records that an environment's setup script was given
// a repository's secrets (their names, never their values): the server
// read them itself, for no request.
func auditSetupSecrets(ctx context.Context, st store.Store, repo string, env []string, logger *slog.Logger) {
	var names []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	detail, _ := json.Marshal(map[string]any{"names": names, "for": "setup"})
	e := &store.AuditEntry{Channel: store.ChannelServer, Action: "secret.read", Target: "repo:" + strings.ToLower(repo), Result: store.AuditOK, Detail: detail}
	if err := st.AppendAudit(ctx, e); err != nil {
		logger.Error("recording an audit entry", "action", e.Action, "target", e.Target, "err", err)
	}
}
