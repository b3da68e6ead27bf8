package local

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// Owners
//
// Every box records its owner (package owner) in its run dir from the
// moment it has one (owner.RecordFile): Config.Owner (a server's, shared by its
// restarts), or the provider's instance. Warm boxes are the instance's
// alone, and their names say so (pool.go). ListOwned gives both to
// owner.Prune; Destroy takes the handles of either.

// instance is the provider's instance owner (package owner), made on
// first need and held until Close: the owner of its warm boxes, and of
// the boxes it starts when Config.Owner is empty.
func (p *Provider) instance() (*owner.Hold, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inst == nil {
		if p.closed {
			return nil, errors.New("the local backend is closed")
		}
		h, err := owner.NewInstance(p.cfg.OwnersDir)
		if err != nil {
			return nil, err
		}
		p.inst = h
	}
	return p.inst, nil
}

// Instance is the provider's instance owner: the owner of its warm boxes
// (and of the boxes it starts without Config.Owner). "" until first needed.
func (p *Provider) Instance() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inst == nil {
		return ""
	}
	return p.inst.ID()
}

// boxOwner is the owner a started box is recorded with.
func (p *Provider) boxOwner() (string, error) {
	if p.cfg.Owner != "" {
		return p.cfg.Owner, nil
	}
	h, err := p.instance()
	if err != nil {
		return "", fmt.Errorf("owning the box: %w", err)
	}
	return h.ID(), nil
}

var _ owner.Lister = (*Provider)(nil)

// ListOwned implements owner.Lister: the boxes of List with the owner each
// recorded in its run dir (owner.RecordFile) when it was made, and the warm boxes
// (named for their instance). A box whose run dir records no owner (made
// by an older Harvest, or this instant) has Owner "", and so has a cgroup
// left without its run dir: nothing says whose it was.
func (p *Provider) ListOwned(ctx context.Context) ([]owner.Box, error) {
	hs, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []owner.Box
	for _, h := range hs {
		out = append(out, owner.Box{Handle: h, Owner: owner.Recorded(p.boxDir(h.ID))})
	}
	warm := map[string]bool{}
	ents, err := os.ReadDir(p.cfg.RunDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		warm[e.Name()] = e.IsDir()
	}
	if p.ready() == nil {
		ids, err := p.cg.List()
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			warm[id] = true
		}
	}
	for id, ok := range warm {
		if own := warmOwner(id); ok && own != "" {
			out = append(out, owner.Box{Handle: sandbox.Handle{ID: id, Backend: Name}, Owner: own, Warm: true})
		}
	}
	return out, nil
}
