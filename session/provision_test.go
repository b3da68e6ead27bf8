package session

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
)

// dyingBoxes is the stack's real backend, whose first boxes die (are
// destroyed) as soon as they have started, before the session sets them
// up: as a box ended by its fence, the kernel's OOM killer or a person.
type dyingBoxes struct {
	sandbox.Provider
	die     int32
	started atomic.Int32
}

func (p *dyingBoxes) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	sb, err := p.Provider.Start(ctx, spec)
	if err == nil && p.started.Add(1) <= p.die {
		if err := sb.Destroy(ctx); err != nil {
			return nil, err
		}
	}
	return sb, err
}

// TestBoxDiesWhileSettingUp: a box that dies while the session sets it
// up (checkout, the agent's start) is replaced, and the session becomes
// idle on the next one; boxes dying maxLostBoxes times in a row fail the
// session, with the box's error.
func TestBoxDiesWhileSettingUp(t *testing.T) {
	for _, c := range []struct {
		name string
		die  int32
		want store.State
	}{
		{"Once", 1, store.StateIdle},
		{"Always", maxLostBoxes, store.StateFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, withoutManager)
			var p *dyingBoxes
			e.backends = func(name string) (sandbox.Provider, error) {
				real, err := e.Backends(name)
				if err != nil {
					return nil, err
				}
				if p == nil {
					p = &dyingBoxes{Provider: real, die: c.die}
				}
				return p, nil
			}
			e.open()
			v := e.create("")
			w := e.watch(v.ID)
			ev := w.Until("the session idle or failed", func(ev event.Event) bool {
				st, ok := ev.Data.(event.SessionState)
				return ok && (st.State == string(store.StateIdle) || st.State == string(store.StateFailed))
			})
			st := ev.Data.(event.SessionState)
			if st.State != string(c.want) {
				t.Fatalf("the session is %s (%s); want %s", st.State, st.Reason, c.want)
			}
			if got := p.started.Load(); got != c.die+1 && c.want == store.StateIdle {
				t.Errorf("%d boxes started; want %d (one dead, one that lives)", got, c.die+1)
			}
			if c.want == store.StateFailed && (p.started.Load() != maxLostBoxes || !strings.Contains(st.Reason, "sandbox")) {
				t.Errorf("%d boxes started, failed with %q; want %d, and the box's error", p.started.Load(), st.Reason, maxLostBoxes)
			}
		})
	}
}
