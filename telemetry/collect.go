package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Sources are what Metrics reads when it is scraped: what the Manager,
// the journal, the backends and the disk can say at any moment. Every
// field is optional.
type Sources struct {
	// Store counts the sessions by state (one GROUP BY per scrape,
	// bounded by StoreTimeout).
	Store interface {
		CountSessions(ctx context.Context) ([]store.StateCount, error)
	}
	Journal interface{ Stats() journal.Stats }
	// Sessions is the Manager: runners, turns, leases.
	Sessions interface{ Stats() session.Stats }
	// Backends returns the sandbox backends opened so far (their warm
	// pools: sandbox.Pooler).
	Backends func() []sandbox.Provider
	// Disk measures the data directory's filesystem and the session disks
	// in it (Manager.DiskUsage): the harvest_disk_* families.
	Disk func(context.Context) (session.DiskUsage, error)
	// Logger gets a source that fails (default: discard).
	Logger *slog.Logger
}

// StoreTimeout bounds the store's query at a scrape.
const StoreTimeout = 5 * time.Second

// Watch adds the families read from src when scraped. Call it once.
func (m *Metrics) Watch(src Sources) {
	if src.Logger == nil {
		src.Logger = slog.New(slog.DiscardHandler)
	}
	m.reg.MustRegister(&sourceCollector{src: src, states: states})
}

// states are the session states, every one reported (0 when none).
var states = []store.State{store.StatePending, store.StateProvisioning, store.StateIdle, store.StateWorking,
	store.StateWaiting, store.StateCancelling, store.StateSuspended, store.StateStopped, store.StateFailed}

var (
	descSessions      = prometheus.NewDesc("harvest_sessions", "Sessions in the store, by state (every node of a store reports the same: use max, not sum).", []string{"state"}, nil)
	descRunners       = prometheus.NewDesc("harvest_session_runners", "Sessions this server runs (a runner each): live ones, and those being suspended or ended.", nil, nil)
	descTurnsRunning  = prometheus.NewDesc("harvest_turns_running", "Turns running on this server.", nil, nil)
	descDraining      = prometheus.NewDesc("harvest_draining", "1 while this server drains for a restart (no new sessions, messages or turns).", nil, nil)
	descStored        = prometheus.NewDesc("harvest_journal_events_stored_total", "Events the journal stored (each then handed to the session's subscribers).", nil, nil)
	descCommits       = prometheus.NewDesc("harvest_journal_commits_total", "Transactions the journal stored events in (a commit groups what was queued).", nil, nil)
	descRetries       = prometheus.NewDesc("harvest_journal_commit_retries_total", "Journal commits that failed and were retried.", nil, nil)
	descQueued        = prometheus.NewDesc("harvest_journal_queued_events", "Events waiting for the journal's writer.", nil, nil)
	descSubscribers   = prometheus.NewDesc("harvest_journal_subscribers", "Event subscriptions open (SSE streams, and the server's own followers).", nil, nil)
	descCutOff        = prometheus.NewDesc("harvest_journal_subscribers_cut_off_total", "Subscribers cut off for reading too slowly (they reconnect and lose nothing).", nil, nil)
	descLeasesHeld    = prometheus.NewDesc("harvest_leases_held", "Sessions this node holds a lease on (several nodes; 0 on a lone server).", nil, nil)
	descLeasesTaken   = prometheus.NewDesc("harvest_leases_taken_total", "Leases this node took.", nil, nil)
	descLeasesRenewed = prometheus.NewDesc("harvest_leases_renewed_total", "Lease renewals (each lease, each round).", nil, nil)
	descLeasesLost    = prometheus.NewDesc("harvest_leases_lost_total", "Leases this node lost (taken over, or not renewed in time).", nil, nil)
	descTakenOver     = prometheus.NewDesc("harvest_leases_taken_over_total", "Sessions this node took over because no node owned them.", nil, nil)
	descPoolSize      = prometheus.NewDesc("harvest_warm_pool_size", "Warm boxes a backend's pool keeps.", []string{"backend"}, nil)
	descPoolReady     = prometheus.NewDesc("harvest_warm_pool_ready", "Warm boxes ready now.", []string{"backend"}, nil)
	descPoolTakes     = prometheus.NewDesc("harvest_warm_pool_takes_total", "Boxes started through a warm pool, by result (hit: from a warm box; miss: prepared on the spot).", []string{"backend", "result"}, nil)
	descLimits        = prometheus.NewDesc("harvest_sessions_disk_limit_bytes", "The sum of the disk limits (limits.disk_bytes) of the store's sessions that keep a disk: every state but stopped and failed (every node of a store reports the same: use max).", nil, nil)
	descFree          = prometheus.NewDesc("harvest_disk_free_bytes", "Free space of the data directory's filesystem (for unprivileged users, as df shows it).", nil, nil)
	descSize          = prometheus.NewDesc("harvest_disk_size_bytes", "Size of the data directory's filesystem.", nil, nil)
	descFloor         = prometheus.NewDesc("harvest_disk_floor_bytes", "The floor of free space (--min-free) below which this node refuses new sessions, resumes and builds (0: none).", nil, nil)
	descPromised      = prometheus.NewDesc("harvest_disk_promised_bytes", "The sum of the sizes of this node's live session disks (mounted or held by a box): what they were promised.", nil, nil)
	descPromisedFree  = prometheus.NewDesc("harvest_disk_promised_free_bytes", "What this node's live session disks may still take of the filesystem (promised less what they hold): above harvest_disk_free_bytes, the node is overcommitted.", nil, nil)
	descAllocated     = prometheus.NewDesc("harvest_disk_allocated_bytes", "Host space the session disks' images in the data directory take now (live and ended).", nil, nil)
)

// sourceCollector reads Sources at each scrape.
type sourceCollector struct {
	src    Sources
	states []store.State

	mu     sync.Mutex // one scrape's store query at a time
	logged time.Time  // the last failure logged (at most one a minute)
}

func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descRunners, descTurnsRunning, descDraining, descStored, descCommits,
		descRetries, descQueued, descSubscribers, descCutOff, descLeasesHeld, descLeasesTaken, descLeasesRenewed,
		descLeasesLost, descTakenOver, descPoolSize, descPoolReady, descPoolTakes, descLimits, descFree, descSize, descFloor, descPromised, descPromisedFree, descAllocated} {
		ch <- d
	}
}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	if c.src.Store != nil {
		counts, err := c.countSessions()
		if err != nil {
			c.fail(ch, descSessions, fmt.Errorf("counting the sessions by state: %w", err))
		} else {
			by := map[store.State]store.StateCount{}
			for _, n := range counts {
				by[n.State] = n
			}
			var promised int64
			for _, s := range c.states {
				gauge(descSessions, float64(by[s].Sessions), string(s))
				if !s.Ended() {
					promised += by[s].DiskBytes
				}
			}
			gauge(descLimits, float64(promised))
		}
	}
	if s := c.src.Sessions; s != nil {
		st := s.Stats()
		gauge(descRunners, float64(st.Runners))
		gauge(descTurnsRunning, float64(st.Turns))
		draining := 0.0
		if st.Draining {
			draining = 1
		}
		gauge(descDraining, draining)
		gauge(descLeasesHeld, float64(st.LeasesHeld))
		counter(descLeasesTaken, st.LeasesTaken)
		counter(descLeasesRenewed, st.LeasesRenewed)
		counter(descLeasesLost, st.LeasesLost)
		counter(descTakenOver, st.TakenOver)
	}
	if j := c.src.Journal; j != nil {
		st := j.Stats()
		counter(descStored, st.Stored)
		counter(descCommits, st.Commits)
		counter(descRetries, st.Retries)
		gauge(descQueued, float64(st.Queued))
		gauge(descSubscribers, float64(st.Subscribers))
		counter(descCutOff, st.CutOff)
	}
	if c.src.Backends != nil {
		for _, p := range c.src.Backends() {
			pl, ok := p.(sandbox.Pooler)
			if !ok {
				continue
			}
			st, name := pl.PoolStats(), p.Name()
			gauge(descPoolSize, float64(st.Size), name)
			gauge(descPoolReady, float64(st.Ready), name)
			counter(descPoolTakes, st.Hits, name, "hit")
			counter(descPoolTakes, st.Misses, name, "miss")
		}
	}
	if c.src.Disk != nil {
		ctx, cancel := context.WithTimeout(context.Background(), StoreTimeout)
		u, err := c.src.Disk(ctx)
		cancel()
		if err != nil {
			// The filesystem's families, or (measured) the disks' only.
			d := descFree
			if u.Size > 0 {
				d = descPromised
			}
			c.fail(ch, d, fmt.Errorf("measuring the data directory's disks: %w", err))
		}
		if u.Size > 0 { // the filesystem was measured, if not every disk
			gauge(descFree, float64(u.Free))
			gauge(descSize, float64(u.Size))
			gauge(descFloor, float64(u.Floor))
		}
		if err == nil {
			gauge(descPromised, float64(u.Promised))
			gauge(descPromisedFree, float64(u.PromisedFree))
			gauge(descAllocated, float64(u.Allocated))
		}
	}
}

func (c *sourceCollector) countSessions() ([]store.StateCount, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), StoreTimeout)
	defer cancel()
	return c.src.Store.CountSessions(ctx)
}

// fail reports a source that failed: the scrape says so (promhttp logs
// it and serves the rest), and the log, at most once a minute.
func (c *sourceCollector) fail(ch chan<- prometheus.Metric, d *prometheus.Desc, err error) {
	ch <- prometheus.NewInvalidMetric(d, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.logged) > time.Minute {
		c.logged = time.Now()
		c.src.Logger.Warn("a metrics source failed; its families are left out of the scrape", "err", err)
	}
}
