package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/store"
)

// memNames lists a graph as "name(type): obs|obs" and "from -type-> to".
func memNames(g *store.MemoryGraph) []string {
	var out []string
	for _, e := range g.Entities {
		var obs []string
		for _, o := range e.Observations {
			obs = append(obs, o.Text)
		}
		out = append(out, fmt.Sprintf("%s(%s): %s", e.Name, e.Type, strings.Join(obs, "|")))
	}
	for _, r := range g.Relations {
		out = append(out, fmt.Sprintf("%s -%s-> %s", r.From, r.Type, r.To))
	}
	return out
}

func obsOf(texts ...string) []*store.MemoryObservation {
	var out []*store.MemoryObservation
	for _, t := range texts {
		out = append(out, &store.MemoryObservation{Text: t})
	}
	return out
}

// testMemory: entities, observations and relations are kept per scope
// (repository and owner) with the session and turn of their write; a
// create skips what exists; search is case-insensitive over names, types
// and observations and brings the relations between what it found;
// deletes cascade; a bound refuses a write whole.
func testMemory(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	sc := store.MemoryScope{Repo: "github:octo/hello"}
	mine := store.MemoryScope{Repo: "github:octo/hello", Owner: "tok-1"}
	other := store.MemoryScope{Repo: "/srv/repos/other"}
	w := store.MemoryWrite{Session: "s-1", Turn: 3}

	got, err := st.CreateMemoryEntities(ctx, sc, []*store.MemoryEntity{
		{Name: "build", Type: "procedure", Observations: obsOf("run make test", "needs Go 1.26", "run make test")},
		{Name: "db", Type: "component", Observations: obsOf("SQLite in WAL mode")},
		{Name: "build", Type: "dup", Observations: obsOf("ignored")},
	}, w)
	if err != nil || len(got) != 2 || got[0].Session != "s-1" || got[0].Turn != 3 || len(got[0].Observations) != 2 {
		t.Fatalf("create = %v, %v; want build (two observations) and db, written by s-1 turn 3", got, err)
	}
	if again, err := st.CreateMemoryEntities(ctx, sc, []*store.MemoryEntity{{Name: "db", Type: "x"}}, w); err != nil || len(again) != 0 {
		t.Fatalf("creating an existing entity = %v, %v; want nothing created", again, err)
	}
	if _, err := st.CreateMemoryEntities(ctx, other, []*store.MemoryEntity{{Name: "build", Type: "procedure", Observations: obsOf("npm test")}}, w); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateMemoryEntities(ctx, mine, []*store.MemoryEntity{{Name: "pref", Type: "note", Observations: obsOf("tabs")}}, w); err != nil {
		t.Fatal(err)
	}

	added, err := st.AddMemoryObservations(ctx, sc, "db", []string{"migrations in schema.go", "SQLite in WAL mode"}, store.MemoryWrite{Session: "s-2", Turn: 1})
	if err != nil || !slices.Equal(added, []string{"migrations in schema.go"}) {
		t.Fatalf("add observations = %v, %v; want only the new one", added, err)
	}
	if _, err := st.AddMemoryObservations(ctx, sc, "nope", []string{"x"}, w); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("observations of a missing entity: %v; want ErrNotFound", err)
	}
	rs, err := st.CreateMemoryRelations(ctx, sc, []*store.MemoryRelation{{From: "build", To: "db", Type: "uses"}, {From: "build", To: "db", Type: "uses"}}, w)
	if err != nil || len(rs) != 1 {
		t.Fatalf("create relations = %v, %v; want one", rs, err)
	}
	if _, err := st.CreateMemoryRelations(ctx, sc, []*store.MemoryRelation{{From: "build", To: "ghost", Type: "uses"}}, w); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("a relation to a missing entity: %v; want ErrNotFound naming it", err)
	}

	all, err := st.ReadMemory(ctx, sc, store.MemoryQuery{})
	want := []string{"build(procedure): run make test|needs Go 1.26", "db(component): SQLite in WAL mode|migrations in schema.go", "build -uses-> db"}
	if err != nil || !slices.Equal(memNames(all), want) {
		t.Fatalf("read = %q, %v; want %q", memNames(all), err, want)
	}
	if o := all.Entities[1].Observations[1]; o.Session != "s-2" || o.Turn != 1 || o.CreatedAt.IsZero() {
		t.Fatalf("an observation's provenance = %+v; want s-2 turn 1 with a time", o)
	}
	for q, want := range map[string][]string{
		"wal":       {"db(component): SQLite in WAL mode|migrations in schema.go"},
		"PROCEDURE": {"build(procedure): run make test|needs Go 1.26"},
		"b":         want,
		"npm":       nil,
	} {
		g, err := st.ReadMemory(ctx, sc, store.MemoryQuery{Search: q})
		if err != nil || !slices.Equal(memNames(g), want) {
			t.Errorf("search %q = %q, %v; want %q", q, memNames(g), err, want)
		}
	}
	g, err := st.ReadMemory(ctx, sc, store.MemoryQuery{Names: []string{"db", "missing"}})
	if err != nil || len(g.Entities) != 1 || len(g.Relations) != 0 {
		t.Fatalf("open db = %q, %v; want db without the relation (build is not opened)", memNames(g), err)
	}
	if g, err := st.ReadMemory(ctx, mine, store.MemoryQuery{}); err != nil || !slices.Equal(memNames(g), []string{"pref(note): tabs"}) {
		t.Fatalf("an owner's scope = %q, %v; want its own entity only", memNames(g), err)
	}

	e, err := st.SetMemoryEntity(ctx, sc, "db", "store", []string{"migrations in schema.go", "one writer connection"}, store.MemoryWrite{Session: "api", Turn: 0})
	if err != nil || e.Type != "store" || len(e.Observations) != 2 || e.Observations[0].Session != "s-2" || e.Observations[1].Session != "api" {
		t.Fatalf("set = %+v, %v; want the kept observation with its provenance, then the new one", e, err)
	}
	if e, err := st.SetMemoryEntity(ctx, sc, "new", "note", []string{"x"}, w); err != nil || e.Name != "new" || len(e.Observations) != 1 {
		t.Fatalf("set of a new entity = %+v, %v", e, err)
	}

	size, err := st.MemorySize(ctx, sc)
	if err != nil || size <= 0 {
		t.Fatalf("size = %d, %v", size, err)
	}
	_, err = st.CreateMemoryEntities(ctx, sc, []*store.MemoryEntity{{Name: "big", Type: "t", Observations: obsOf(strings.Repeat("x", 100))}}, store.MemoryWrite{MaxBytes: size + 50})
	if !errors.Is(err, store.ErrMemoryFull) {
		t.Fatalf("a write over the bound: %v; want ErrMemoryFull", err)
	}
	if n, _ := st.MemorySize(ctx, sc); n != size {
		t.Fatalf("a refused write changed the size from %d to %d", size, n)
	}

	if n, err := st.DeleteMemoryObservations(ctx, sc, "db", []string{"one writer connection", "never there"}); err != nil || n != 1 {
		t.Fatalf("delete observations = %d, %v; want 1", n, err)
	}
	if n, err := st.DeleteMemoryRelations(ctx, sc, []*store.MemoryRelation{{From: "build", To: "db", Type: "uses"}}); err != nil || n != 1 {
		t.Fatalf("delete relation = %d, %v; want 1", n, err)
	}
	if _, err := st.CreateMemoryRelations(ctx, sc, []*store.MemoryRelation{{From: "db", To: "build", Type: "serves"}}, w); err != nil {
		t.Fatal(err)
	}
	if n, err := st.DeleteMemoryEntities(ctx, sc, []string{"build", "build", "ghost"}); err != nil || n != 1 {
		t.Fatalf("delete entities = %d, %v; want 1", n, err)
	}
	all, err = st.ReadMemory(ctx, sc, store.MemoryQuery{})
	want = []string{"db(store): migrations in schema.go", "new(note): x"}
	if err != nil || !slices.Equal(memNames(all), want) {
		t.Fatalf("after the deletes = %q, %v; want %q (the relation went with build)", memNames(all), err, want)
	}
	if g, _ := st.ReadMemory(ctx, other, store.MemoryQuery{}); !slices.Equal(memNames(g), []string{"build(procedure): npm test"}) {
		t.Fatalf("another repository's memory changed: %q", memNames(g))
	}

	// Search folds ASCII case only: É and é differ, M and m do not.
	cs := store.MemoryScope{Repo: "github:octo/case"}
	if _, err := st.CreateMemoryEntities(ctx, cs, []*store.MemoryEntity{{Name: "Émile", Type: "person", Observations: obsOf("ÇA VA")}}, w); err != nil {
		t.Fatal(err)
	}
	for q, n := range map[string]int{"ÉMILE": 1, "émile": 0, "Ça va": 1, "ça va": 0, "PERSON": 1} {
		if g, err := st.ReadMemory(ctx, cs, store.MemoryQuery{Search: q}); err != nil || len(g.Entities) != n {
			t.Errorf("search %q = %q, %v; want %d entities (ASCII case folding only)", q, memNames(g), err, n)
		}
	}

	// A token's deletion takes its own memory, not the shared one.
	if err := st.CreateToken(ctx, &store.Token{ID: "tok-1", Name: "alice", Hash: []byte("h-mem"), CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteToken(ctx, "tok-1"); err != nil {
		t.Fatal(err)
	}
	if g, _ := st.ReadMemory(ctx, mine, store.MemoryQuery{}); len(g.Entities) != 0 {
		t.Fatalf("a deleted token's memory is left: %q", memNames(g))
	}
	if g, _ := st.ReadMemory(ctx, sc, store.MemoryQuery{}); len(g.Entities) != 2 {
		t.Fatalf("a token's deletion changed the shared memory: %q", memNames(g))
	}
}

// testMemorySeed: a scope is seeded once, only while it is empty and was
// never seeded, even by concurrent callers.
func testMemorySeed(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	sc := store.MemoryScope{Repo: "github:octo/seed"}
	seed := []*store.MemoryEntity{{Name: "octo/seed", Type: "repository", Observations: obsOf("a README line")}}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := st.SeedMemory(ctx, sc, seed, store.MemoryWrite{Session: "s-1", Turn: 1})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d concurrent seeds succeeded; want 1", wins)
	}
	if _, err := st.DeleteMemoryEntities(ctx, sc, []string{"octo/seed"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.SeedMemory(ctx, sc, seed, store.MemoryWrite{}); err != nil || ok {
		t.Fatalf("seeding an emptied scope = %v, %v; want no second seeding", ok, err)
	}
	used := store.MemoryScope{Repo: "github:octo/used"}
	if _, err := st.CreateMemoryEntities(ctx, used, []*store.MemoryEntity{{Name: "a", Type: "b"}}, store.MemoryWrite{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.SeedMemory(ctx, used, seed, store.MemoryWrite{}); err != nil || ok {
		t.Fatalf("seeding a scope with entities = %v, %v; want no seeding", ok, err)
	}
	if ok, err := st.SeedMemory(ctx, store.MemoryScope{Repo: "r"}, []*store.MemoryEntity{{Name: "x", Type: "y", Observations: obsOf(strings.Repeat("z", 64))}}, store.MemoryWrite{MaxBytes: 10}); !errors.Is(err, store.ErrMemoryFull) || ok {
		t.Fatalf("a seed over the bound = %v, %v; want ErrMemoryFull", ok, err)
	}
}

// testMemoryBoundConcurrent: writers racing on one scope cannot together
// pass its bound: of eight writes of 30 bytes under a bound of 100, three
// are stored, whatever their order, and the others are ErrMemoryFull.
func testMemoryBoundConcurrent(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	sc := store.MemoryScope{Repo: "github:octo/race"}
	other := store.MemoryScope{Repo: "github:octo/race", Owner: "tok-1"}
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		stored     int
		otherCount int
	)
	for i := range 8 {
		wg.Add(2)
		for _, s := range []store.MemoryScope{sc, other} {
			go func() {
				defer wg.Done()
				// name (2 bytes) + type (1) + observation (27) = 30 bytes.
				e := &store.MemoryEntity{Name: fmt.Sprintf("e%d", i), Type: "t", Observations: obsOf(strings.Repeat("x", 27))}
				_, err := st.CreateMemoryEntities(ctx, s, []*store.MemoryEntity{e}, store.MemoryWrite{MaxBytes: 100})
				switch {
				case err == nil:
					mu.Lock()
					if s == sc {
						stored++
					} else {
						otherCount++
					}
					mu.Unlock()
				case !errors.Is(err, store.ErrMemoryFull):
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if stored != 3 || otherCount != 3 {
		t.Fatalf("%d and %d writes of 30 bytes passed a bound of 100 in two scopes; want 3 in each", stored, otherCount)
	}
	for _, s := range []store.MemoryScope{sc, other} {
		if n, err := st.MemorySize(ctx, s); err != nil || n != 90 {
			t.Fatalf("the size of %+v = %d, %v; want 90", s, n, err)
		}
	}
}
