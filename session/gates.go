package session

import (
	"sync"
)

// gates are per-session read-write locks, made on demand and dropped when
// unused.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	rw   sync.RWMutex
	refs int
}

func (g *gates) get(id string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*gate{}
	}
	x := g.m[id]
	if x == nil {
		x = &gate{}
		g.m[id] = x
	}
	x.refs++
	return x
}

func (g *gates) put(id string, x *gate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if x.refs--; x.refs == 0 {
		delete(g.m, id)
	}
}

func (g *gates) rlock(id string) func() {
	x := g.get(id)
	x.rw.RLock()
	return func() { x.rw.RUnlock(); g.put(id, x) }
}

func (g *gates) lock(id string) func() {
	x := g.get(id)
	x.rw.Lock()
	return func() { x.rw.Unlock(); g.put(id, x) }
}
