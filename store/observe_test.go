package store_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/store/storetest"
)

// ops records what an observed store reports.
type ops struct {
	mu  sync.Mutex
	n   map[string]int
	err map[string]error
}

func (o *ops) StoreOp(op string, d time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d < 0 {
		panic("a negative duration")
	}
	o.n[op]++
	o.err[op] = err
}

func newOps() *ops { return &ops{n: map[string]int{}, err: map[string]error{}} }

func openObserved(t *testing.T, o store.Observer) store.Store {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return store.Observe(s, o)
}

// TestObserveConformance: a measured store is still a store (the whole
// conformance suite), and what it reports covers what the suite did.
func TestObserveConformance(t *testing.T) {
	o := newOps()
	storetest.Run(t, func(t *testing.T) store.Store { return openObserved(t, o) })
	for _, op := range []string{"CreateSession", "GetSession", "UpdateSession", "AppendEvents", "AcquireLease", "CountSessions"} {
		if o.n[op] == 0 {
			t.Errorf("the suite's %s calls were not reported", op)
		}
	}
}

// TestObserveReportsErrors: an operation that fails is reported with its
// error.
func TestObserveReportsErrors(t *testing.T) {
	o := newOps()
	s := openObserved(t, o)
	if _, err := s.GetSession(context.Background(), "s-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSession of a missing session: %v", err)
	}
	if o.n["GetSession"] != 1 || !errors.Is(o.err["GetSession"], store.ErrNotFound) {
		t.Fatalf("reported %d GetSession, last error %v; want 1 with ErrNotFound", o.n["GetSession"], o.err["GetSession"])
	}
}

// TestObserveCoversStore fails when Store gains a method that observe*.go
// do not measure (the embedded Store would pass it through unseen).
func TestObserveCoversStore(t *testing.T) {
	defined := methodsIn(t, "observe*.go", "observed")
	st := reflect.TypeFor[store.Store]()
	for i := range st.NumMethod() {
		name := st.Method(i).Name
		if name == "Close" {
			continue
		}
		if !defined[name] {
			t.Errorf("store.Store.%s is not measured by store.Observe: add it to observe.go", name)
		}
	}
}

// methodsIn are the methods of the type recv defined in the package's
// non-test files that match glob.
func methodsIn(t *testing.T, glob, recv string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == recv {
					defined[fn.Name.Name] = true
				}
			}
		}
	}
	return defined
}
