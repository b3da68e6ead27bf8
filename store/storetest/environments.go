package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testEnvironments: environments round-trip, list newest first by repo,
// backend and state, update in place, and a duplicate id is a conflict.
func testEnvironments(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mk := func(id, repo, backend, state string, at time.Time) *store.Environment {
		e := &store.Environment{ID: id, Repo: repo, Name: "app", Ref: "main", Commit: "0123456789abcdef0123456789abcdef01234567",
			Fingerprint: "fp-" + id, Backend: backend, State: state, Detected: []string{"go.mod: go mod download"}, CreatedAt: at}
		if err := st.CreateEnvironment(ctx, e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	e1 := mk("env-1", "github:acme/app", "local", store.EnvReady, base)
	mk("env-2", "github:acme/app", "local", store.EnvBuilding, base.Add(time.Minute))
	mk("env-3", "github:acme/app", "docker", store.EnvReady, base.Add(2*time.Minute))
	mk("env-4", "/src/other", "local", store.EnvFailed, base.Add(3*time.Minute))
	if err := st.CreateEnvironment(ctx, &store.Environment{ID: "env-1", Repo: "x", State: store.EnvReady}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a duplicate id: %v", err)
	}
	got, err := st.GetEnvironment(ctx, "env-1")
	if err != nil || got.Fingerprint != e1.Fingerprint || got.Detected[0] != "go.mod: go mod download" || !got.CreatedAt.Equal(base) {
		t.Fatalf("get: %+v, %v", got, err)
	}
	ids := func(f store.EnvironmentFilter) []string {
		es, err := st.ListEnvironments(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	for _, tc := range []struct {
		f    store.EnvironmentFilter
		want string
	}{
		{store.EnvironmentFilter{}, "[env-4 env-3 env-2 env-1]"},
		{store.EnvironmentFilter{Repo: "github:acme/app", Backend: "local"}, "[env-2 env-1]"},
		{store.EnvironmentFilter{Repo: "github:acme/app", States: []string{store.EnvReady}}, "[env-3 env-1]"},
	} {
		if got := ids(tc.f); fmtList(got) != tc.want {
			t.Errorf("list %+v = %v, want %s", tc.f, got, tc.want)
		}
	}
	up, err := st.UpdateEnvironment(ctx, "env-2", func(e *store.Environment) error {
		e.State, e.SizeBytes, e.BuiltAt = store.EnvReady, 12345, base.Add(5*time.Minute)
		return nil
	})
	if err != nil || up.State != store.EnvReady {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if got, _ := st.GetEnvironment(ctx, "env-2"); got.SizeBytes != 12345 || !got.BuiltAt.Equal(base.Add(5*time.Minute)) {
		t.Fatalf("after update: %+v", got)
	}
	if _, err := st.UpdateEnvironment(ctx, "nope", func(*store.Environment) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing one: %v", err)
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}
