package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/server/cluster"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/spf13/pflag"
)

// harvest serve's several-node flags, and the wiring of package
// server/cluster (forwarding, node tokens) that they turn on. What a node
// does with several nodes is server/cluster's and session's (nodes.go);
// this file only reads the flags.

// nodeConfig is serve's several-node configuration: nil unless --node-id
// or --advertise is given. listen is the address it listens on.
// carryMax is session.Config.CarryMax: how big a workspace carried
// between nodes may be, -1 with --shared-data.
func nodeConfig(f serveFlags, listen string) (n *session.NodeConfig, carryMax int64, err error) {
	n, err = nodeOnly(f, listen)
	if err != nil {
		return nil, 0, err
	}
	if n == nil {
		if f.sharedData || f.carryMax != "" {
			return nil, 0, errors.New("--shared-data and --carry-max are for one of several nodes: give --node-id or --advertise too")
		}
		return nil, 0, nil
	}
	switch {
	case f.sharedData && f.carryMax != "":
		return nil, 0, errors.New("--carry-max bounds the workspaces carried between nodes, which --shared-data turns off: give one of them")
	case f.sharedData:
		carryMax = -1
	case f.carryMax != "":
		carryMax, err = sandbox.ParseSize(f.carryMax)
		if err != nil || carryMax <= 0 {
			return nil, 0, fmt.Errorf("--carry-max %q: give a size like 4g (the largest workspace carried between nodes)", f.carryMax)
		}
	}
	return n, carryMax, nil
}

func nodeOnly(f serveFlags, listen string) (*session.NodeConfig, error) {
	if f.nodeID == "" && f.advertise == "" {
		if f.maxSess != 0 {
			return nil, errors.New("--max-sessions bounds one of several nodes: give --node-id or --advertise too (a lone server has no other node to place sessions on)")
		}
		if f.takeRate != 0 {
			return nil, errors.New("--takeover-rate bounds how fast one of several nodes takes over the others' sessions: give --node-id or --advertise too")
		}
		return nil, nil
	}
	if !isPostgresURL(f.store) {
		return nil, errors.New("--node-id/--advertise: several nodes share one PostgreSQL store: give --store postgres://…")
	}
	if f.maxSess < 0 {
		return nil, fmt.Errorf("--max-sessions %d: give how many sessions this node runs at most (0: no bound)", f.maxSess)
	}
	if f.takeRate < 0 {
		return nil, fmt.Errorf("--takeover-rate %g: give how many sessions a second this node takes over at most (0: the default, %g)", f.takeRate, session.DefaultTakeoverRate)
	}
	if f.leaseTTL < time.Second {
		return nil, fmt.Errorf("--lease-ttl %s: give at least 1s", f.leaseTTL)
	}
	name := f.nodeID
	if name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "harvest"
		}
		name = host
	}
	n := &session.NodeConfig{ID: session.NewNodeID(name), Addr: f.advertise, TTL: f.leaseTTL, Capacity: f.maxSess, TakeoverRate: f.takeRate}
	if n.Addr == "" {
		n.Addr = "http://" + listen
	}
	if u, err := url.Parse(n.Addr); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--advertise %q: give the URL other nodes reach this one at, like http://10.0.0.5:7777", n.Addr)
	}
	return n, nil
}

// addNodeFlags adds serve's several-node flags.
func addNodeFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.nodeID, "node-id", "", "run as one of several nodes on one --store: this node's name (default: the host name); a random suffix makes every start a new owner (see docs/several-machines.md)")
	fl.StringVar(&f.advertise, "advertise", "", "run as one of several nodes on one --store: the URL the other nodes forward this node's sessions' requests to (default http:// and the --listen address)")
	fl.IntVar(&f.maxSess, "max-sessions", 0, "with several nodes: how many sessions this node runs at most (0: no bound); a new session goes to a node with room, and waits (queued) while every node is full")
	fl.Float64Var(&f.takeRate, "takeover-rate", 0, fmt.Sprintf("with several nodes: how many sessions nobody owns (a dead node's) this node takes over a second at most (0: %g); each node takes its share of them, by the nodes' --max-sessions and load", session.DefaultTakeoverRate))
	fl.BoolVar(&f.sharedData, "shared-data", false, "with several nodes: they share the data directory (one machine, or a shared filesystem), so sessions' workspaces are not carried through the store and another node's box may be reattached")
	fl.StringVar(&f.carryMax, "carry-max", "", "with several nodes: the largest workspace carried through the store to the node that takes a session over, like 4g (default 4g); a larger one is not carried")
	fl.DurationVar(&f.leaseTTL, "lease-ttl", session.DefaultLeaseTTL, "with several nodes: how long a session's lease lasts without renewal, so how soon a dead node's sessions are taken over")
}

// nodeHandler is the API, behind the forwarder with several nodes
// (package server/cluster).
func nodeHandler(api http.Handler, mgr *session.Manager, st store.Store, node *session.NodeConfig, tok *cluster.Token, f serveFlags, logger *slog.Logger, stderr io.Writer) http.Handler {
	if node == nil {
		return api
	}
	fmt.Fprintf(stderr, "harvest: node %s of several on the store, advertised at %s\n", node.ID, node.Addr)
	return cluster.Forward(api, cluster.Config{Manager: mgr, Store: st, Node: *node, Streams: !f.natsFollow, Logger: logger, StoreTimeout: f.storeTime, Token: tok})
}
