package session

import (
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
)

// TestLimitsEnforced: when its box starts, a session stores which of its
// limits the box is held to: memory, pids and, with disks on, the disk
// (its box's /tmp and HOME on its mounted disk); without disks, not the
// disk. Before its first box it says nothing.
func TestLimitsEnforced(t *testing.T) {
	for _, c := range []struct {
		name  string
		disks bool
		want  store.Enforcement
	}{
		{"disks", true, store.Enforcement{Memory: true, Pids: true, Disk: true}},
		{"no disks", false, store.Enforcement{Memory: true, Pids: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var opts []envOpt
			if c.disks {
				needDisks(t)
				opts = append(opts, withDisks)
			}
			e := newEnv(t, opts...)
			v := e.create("")
			if v.Session.LimitsEnforced != nil {
				t.Errorf("a session with no box yet: limits enforced %+v", v.Session.LimitsEnforced)
			}
			e.watch(v.Session.ID).State(store.StateIdle)
			got := e.get(v.Session.ID).Session.LimitsEnforced
			if got == nil || *got != c.want {
				t.Fatalf("limits enforced %+v, want %+v", got, c.want)
			}
			stored, err := e.st.GetSession(testbin.Context(t), v.Session.ID)
			if err != nil || stored.LimitsEnforced == nil || *stored.LimitsEnforced != c.want {
				t.Fatalf("stored: %+v, %v", stored, err)
			}
		})
	}
}

// TestEnforcementOfHandle: what a box's handle says of its limits: none
// without isolation (the host backend), memory and pids on every other
// unless the backend could not set one, the disk only with a disk dir.
func TestEnforcementOfHandle(t *testing.T) {
	for _, c := range []struct {
		h    sandbox.Handle
		want store.Enforcement
	}{
		{sandbox.Handle{Unsafe: true, Spec: sandbox.Spec{DiskDir: "/d"}}, store.Enforcement{}},
		{sandbox.Handle{Spec: sandbox.Spec{DiskDir: "/d"}}, store.Enforcement{Memory: true, Pids: true, Disk: true}},
		{sandbox.Handle{}, store.Enforcement{Memory: true, Pids: true}},
		{sandbox.Handle{Unenforced: []string{"memory"}, Spec: sandbox.Spec{DiskDir: "/d"}}, store.Enforcement{Pids: true, Disk: true}},
		{sandbox.Handle{Unenforced: []string{"pids", "memory"}}, store.Enforcement{}},
	} {
		if got := enforcement(c.h); got != c.want {
			t.Errorf("%+v: %+v, want %+v", c.h, got, c.want)
		}
	}
}
