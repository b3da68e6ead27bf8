package session

import (
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/modelproxy"
)

// Observer hears what a Manager's sessions do, for an operator's metrics
// (package telemetry implements it; Config.Observer). Its methods run
// on the goroutine that did the thing — a runner, a turn, a model
// proxy's request — and must return at once. What the Manager can say
// at any moment (runners, turns running, leases) is Stats instead.
type Observer interface {
	// TurnEnded: a turn of an agent of kind agent ended, after d.
	TurnEnded(agent string, end TurnResult, d time.Duration)
	// ModelCall (llm.Observer): a model call of an agent that calls the
	// model from the host (the builtin agent), through the Manager's
	// model clients.
	llm.Observer
	// ProxyRequest (modelproxy.Observer): a request from a box through
	// the Manager's model proxies (the agents that call the model from
	// inside the box).
	modelproxy.Observer
}

// TurnResult is how a turn ended: the event that ended it.
type TurnResult struct {
	// Outcome is "finished", "cancelled" or "failed".
	Outcome string
	// Failure is a failed turn's kind (event.FailureKinds).
	Failure event.FailureKind
}

// The outcomes of TurnResult.
const (
	TurnFinished  = "finished"
	TurnCancelled = "cancelled"
	TurnFailed    = "failed"
)

// Stats are what a Manager runs now and its running counts, for an
// operator's metrics.
type Stats struct {
	// Runners is the sessions with a runner on this server (live, or
	// being suspended, stopped or failed); Turns the turns running.
	Runners, Turns int
	// Draining: Drain was called (no new sessions, messages or turns).
	Draining bool
	// With several nodes (Config.Node): LeasesHeld is the sessions this
	// node holds a lease on; the counters count leases taken (of a new or
	// resumed session, or one nobody owned: TakenOver counts those of the
	// takeover scan), renewed (each lease each round) and lost.
	LeasesHeld                                        int
	LeasesTaken, LeasesRenewed, LeasesLost, TakenOver uint64
}

// Stats returns what the Manager runs now and its counts.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	st := Stats{Runners: len(m.runners), Turns: m.turns, Draining: m.draining}
	if m.node != nil {
		st.LeasesHeld = len(m.node.held)
	}
	m.mu.Unlock()
	st.LeasesTaken, st.LeasesRenewed = m.counts.leasesTaken.Load(), m.counts.leasesRenewed.Load()
	st.LeasesLost, st.TakenOver = m.counts.leasesLost.Load(), m.counts.takenOver.Load()
	return st
}

// turnEnd says how a turn ended from the event that ended it.
func turnResult(p event.Payload) (TurnResult, bool) {
	switch v := p.(type) {
	case event.TurnFinished:
		return TurnResult{Outcome: TurnFinished}, true
	case event.TurnCancelled:
		return TurnResult{Outcome: TurnCancelled}, true
	case event.TurnFailed:
		return TurnResult{Outcome: TurnFailed, Failure: v.Kind}, true
	}
	return TurnResult{}, false
}

func (c *Config) proxyObserver() modelproxy.Observer {
	if c.Observer == nil {
		return nil
	}
	return c.Observer
}
