package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/memory"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestMemoryAPI: what an agent wrote to a repository's memory is listed,
// searched, exported, edited and deleted through the API, by the tokens
// that ran sessions on the repository (and the admin) only; an owner's
// memory is apart from the shared one; mistakes are 400s saying what to
// do.
func TestMemoryAPI(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "msg hi")
	s, err := e.Store.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	key := session.RepoKey(s.Repos[0])
	// An agent of the session stores a fact (what its MCP tools do).
	if _, err := e.Memory.CreateEntities(ctx, memory.Scope{Repo: key}, memory.Provenance{Session: v.ID, Turn: 1},
		[]memory.Entity{{Name: "tests", EntityType: "procedure", Observations: []string{"run go test ./... with -race"}}}); err != nil {
		t.Fatal(err)
	}

	repo := client.MemoryScope{Repo: e.Repo}
	g, err := e.AliceC.ListMemory(ctx, repo, "RACE")
	if err != nil || len(g.Entities) != 1 || g.Entities[0].Session != v.ID || g.Entities[0].Observations[0].Turn != 1 {
		t.Fatalf("alice's search = %+v, %v; want the fact with its session and turn", g, err)
	}
	if g, err := e.AdminC.ListMemory(ctx, client.MemoryScope{Repo: key}, ""); err != nil || len(g.Entities) != 1 {
		t.Fatalf("the admin by key = %+v, %v", g, err)
	}
	if g, err := e.AdminC.ListMemory(ctx, client.MemoryScope{Repo: "Octo/Hello"}, ""); err != nil || len(g.Entities) != 0 {
		t.Fatalf("the admin on another repository = %+v, %v; want nothing", g, err)
	}
	_, err = e.BobC.ListMemory(ctx, repo, "")
	if ce := (*client.Error)(nil); !errors.As(err, &ce) || ce.Status != http.StatusForbidden || !strings.Contains(ce.Message, "has run no session on it") {
		t.Fatalf("bob, who ran no session on the repository: %v; want 403 saying why", err)
	}

	x, err := e.AliceC.PutMemoryEntity(ctx, repo, "tests", wire.MemoryEntityRequest{Type: "procedure", Observations: []string{"run go test ./... with -race", "never -count=0"}})
	if err != nil || len(x.Observations) != 2 || x.Observations[0].Session != v.ID || x.Observations[1].Session != "api" {
		t.Fatalf("put = %+v, %v; want the kept observation's provenance and the new one's (api)", x, err)
	}
	if _, err := e.AliceC.PutMemoryEntity(ctx, client.MemoryScope{Repo: e.Repo, Owner: "me"}, "mine", wire.MemoryEntityRequest{Type: "note", Observations: []string{"alice's own"}}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := e.AliceC.ExportMemory(ctx, repo, &out); err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"entity","name":"tests","entityType":"procedure","observations":["run go test ./... with -race","never -count=0"]}` + "\n"; out.String() != want {
		t.Fatalf("export = %q; want %q (the shared memory only)", out.String(), want)
	}
	if g, err := e.AliceC.ListMemory(ctx, client.MemoryScope{Repo: e.Repo, Owner: "me"}, ""); err != nil || len(g.Entities) != 1 || g.Entities[0].Name != "mine" {
		t.Fatalf("alice's own memory = %+v, %v", g, err)
	}

	alice := "Bearer " + e.Alice
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	for _, c := range []struct {
		method, query, body string
		status              int
		msg                 string
	}{
		{"GET", q("repo", e.Repo, "since", "1"), "", 400, `unknown query parameter "since"`},
		{"GET", "", "", 400, "repo is required"},
		{"GET", q("repo", e.Repo, "owner", e.BobID), "", 403, "reads its own memory only"},
		{"GET", q("repo", "github:octo"), "", 400, "owner/name"},
		{"PUT", q("repo", e.Repo, "name", "bad"), `{"entityType":"two\nlines"}`, 400, "entityType"},
		{"PUT", q("repo", e.Repo), `{"entityType":"x"}`, 400, "name is required"},
		{"PUT", q("repo", e.Repo, "name", "x"), `{"entityType":"x","extra":1}`, 400, "extra"},
		{"DELETE", q("repo", e.Repo, "name", "ghost"), "", 404, `no entity "ghost"`},
		{"DELETE", q("repo", e.Repo, "name", "tests"), `{"a":1}`, 400, "takes no body"},
	} {
		path := "/v1/memory"
		if c.method != "GET" {
			path += "/entity"
		}
		if c.query != "" {
			path += "?" + c.query
		}
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		status, info, _ := e.doRaw(c.method, path, alice, "application/json", body)
		if status != c.status || !strings.Contains(info.Message+strings.Join(info.Details, " "), c.msg) {
			t.Errorf("%s %s: %d %s %v; want %d saying %q", c.method, path, status, info.Message, info.Details, c.status, c.msg)
		}
	}

	if err := e.AliceC.DeleteMemoryEntity(ctx, repo, "tests"); err != nil {
		t.Fatal(err)
	}
	if g, err := e.AliceC.ListMemory(ctx, repo, ""); err != nil || len(g.Entities) != 0 {
		t.Fatalf("after the delete = %+v, %v", g, err)
	}
	if g, _ := e.Memory.Read(context.Background(), memory.Scope{Repo: key, Owner: e.AliceID}, store.MemoryQuery{}); len(g.Entities) != 1 {
		t.Fatalf("deleting from the shared memory touched alice's own: %+v", g)
	}
}
