package backends_test

import (
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/sandboxtest"
)

// boxOps counts what sandbox.Observe reports.
type boxOps struct {
	mu       sync.Mutex
	n, fails map[sandbox.Op]int
	backends map[string]bool
}

func (o *boxOps) BoxOp(backend string, op sandbox.Op, d time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[op]++
	if err != nil {
		o.fails[op]++
	}
	o.backends[backend] = true
}

// TestObservedConformance: a measured provider (how harvest serve opens
// its backends) is still a provider: the conformance suite passes through
// it, on the local backend with its pool, and what it measured covers
// what the suite did.
func TestObservedConformance(t *testing.T) {
	ops := &boxOps{n: map[sandbox.Op]int{}, fails: map[sandbox.Op]int{}, backends: map[string]bool{}}
	forEachVariant(t, []string{"local+pool"}, func(t *testing.T, b sandboxtest.Backend) {
		newProvider, left := b.New, b.Leftovers
		b.New = func(t testing.TB, runDir string) sandbox.Provider {
			return sandbox.Observe(newProvider(t, runDir), ops)
		}
		b.Leftovers = func(t testing.TB, p sandbox.Provider, h sandbox.Handle) []string {
			return left(t, p.(interface{ Unwrap() sandbox.Provider }).Unwrap(), h)
		}
		sandboxtest.Run(t, b)
	})
	ops.mu.Lock()
	defer ops.mu.Unlock()
	for _, op := range []sandbox.Op{sandbox.OpCreate, sandbox.OpRecover, sandbox.OpStop, sandbox.OpDestroy, sandbox.OpExec} {
		if ops.n[op] == 0 {
			t.Errorf("the suite's %s operations were not reported (%v)", op, ops.n)
		}
	}
	if ops.fails[sandbox.OpCreate] == 0 {
		t.Errorf("the suite's bad specs (BadInput) were not reported as failed creates: %v", ops.fails)
	}
	if len(ops.backends) != 1 || !ops.backends["local"] {
		t.Errorf("reported backends %v, want local only", ops.backends)
	}
}
