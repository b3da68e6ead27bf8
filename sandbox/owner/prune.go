package owner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
)

// Box is one box of a backend with the owner it records.
type Box struct {
	Handle sandbox.Handle
	// Owner is the ID of the owner the box was made under ("" when it
	// records none: made by a Harvest older than owners, or being made
	// this instant).
	Owner string
	// Warm: prepared ahead of demand and never claimed (a local warm
	// box). Its Owner is the instance of the process that prepared it.
	Warm bool
}

// Lister is a backend that says who owns each of its boxes, warm ones
// included. Its Destroy takes their handles.
type Lister interface {
	sandbox.Provider
	ListOwned(ctx context.Context) ([]Box, error)
}

// Action is what Prune did with a box.
type Action string

const (
	// Destroyed: its owner runs nowhere; the box is gone.
	Destroyed Action = "destroyed"
	// WouldDestroy: the same, in a dry run.
	WouldDestroy Action = "would destroy"
	// Owned: its owner runs; the box was left alone.
	Owned Action = "kept: its owner runs"
	// Unrecorded: the box records no owner; it was left alone.
	Unrecorded Action = "kept: no owner recorded"
	// Failed: destroying it failed (Result.Err).
	Failed Action = "failed"
)

// Result is one box Prune looked at.
type Result struct {
	Backend string
	Box     Box
	Action  Action
	Err     error
}

// Prune destroys the boxes of ps whose owner no running process holds
// (only reports them with dryRun), leaving alone those of running owners
// and those that record none. Each dead owner is claimed while its boxes
// are destroyed (see the package doc). Lock files no process holds are
// removed at the end. A backend that cannot list its boxes is an error
// in the result; the others are pruned all the same.
func Prune(ctx context.Context, dir string, ps []Lister, dryRun bool) ([]Result, error) {
	boxes, errs := listAll(ctx, ps)
	byOwner := map[string][]int{}
	var owners []string
	for i, b := range boxes {
		if _, ok := byOwner[b.box.Owner]; !ok {
			owners = append(owners, b.box.Owner)
		}
		byOwner[b.box.Owner] = append(byOwner[b.box.Owner], i)
	}
	slices.Sort(owners)
	var out []Result
	for _, id := range owners {
		idx := byOwner[id]
		if id == "" {
			for _, i := range idx {
				out = append(out, Result{Backend: boxes[i].p.Name(), Box: boxes[i].box, Action: Unrecorded})
			}
			continue
		}
		c, ok, err := TryClaim(dir, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			for _, i := range idx {
				out = append(out, Result{Backend: boxes[i].p.Name(), Box: boxes[i].box, Action: Owned})
			}
			continue
		}
		for _, i := range idx {
			r := Result{Backend: boxes[i].p.Name(), Box: boxes[i].box, Action: WouldDestroy}
			if !dryRun {
				r.Action = Destroyed
				if err := boxes[i].p.Destroy(ctx, boxes[i].box.Handle); err != nil {
					r.Action, r.Err = Failed, err
				}
			}
			out = append(out, r)
		}
		c.Release()
	}
	if !dryRun {
		stale, err := Stale(dir)
		if err != nil {
			errs = append(errs, err)
		}
		for _, id := range stale {
			if c, ok, _ := TryClaim(dir, id); ok {
				c.Release()
			}
		}
	}
	return out, errors.Join(errs...)
}

// DestroyOwned destroys every box of ps that records owner id, which the
// caller holds alone (Hold.Sole): a server stopping for good sweeping what
// its sessions left.
func DestroyOwned(ctx context.Context, ps []Lister, id string) ([]Result, error) {
	boxes, errs := listAll(ctx, ps)
	var out []Result
	for _, b := range boxes {
		if b.box.Owner != id {
			continue
		}
		r := Result{Backend: b.p.Name(), Box: b.box, Action: Destroyed}
		if err := b.p.Destroy(ctx, b.box.Handle); err != nil {
			r.Action, r.Err = Failed, err
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

type listed struct {
	p   Lister
	box Box
}

func listAll(ctx context.Context, ps []Lister) ([]listed, []error) {
	var out []listed
	var errs []error
	for _, p := range ps {
		bs, err := p.ListOwned(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the boxes of the %s backend: %w", p.Name(), err))
			continue
		}
		for _, b := range bs {
			out = append(out, listed{p, b})
		}
	}
	return out, errs
}

// Summary counts results by action, like "2 destroyed, 1 kept: its owner
// runs".
func Summary(rs []Result) string {
	n := map[Action]int{}
	var order []Action
	for _, r := range rs {
		if n[r.Action] == 0 {
			order = append(order, r.Action)
		}
		n[r.Action]++
	}
	var parts []string
	for _, a := range order {
		parts = append(parts, fmt.Sprintf("%d %s", n[a], a))
	}
	if len(parts) == 0 {
		return "no boxes"
	}
	return strings.Join(parts, ", ")
}
