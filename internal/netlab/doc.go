// Package netlab runs several `harvest serve` nodes as separate machines
// for the tests of several nodes, and breaks the network and the services
// between them on purpose.
//
// # Why namespaces
//
// Nodes on one machine share more than a real cluster does: one loopback
// where every port is reachable, one /tmp and /run/harvest where a node
// could reach another's boxes, sockets and disks, one process table where
// one node's tools are visible to the other. A failure test run that way
// can pass because of what the nodes share (a node that "took over" a
// session reattaching the old owner's box) and cannot show what separate
// machines do (a paused node's box running on, untouched, forever). So
// each node gets namespaces of its own:
//
//   - a network namespace, linked by a veth pair to a bridge in the lab's
//     own network namespace, where PostgreSQL (internal/testbin's real
//     server, started from a thread inside the lab's namespace) and
//     nats-server listen on the bridge's address; the test process is
//     linked to the bridge too (it is the outside world: harvest sim as the
//     model API listens there, Lab.Listen) and reaches the nodes' APIs
//     through it;
//   - a mount namespace (private propagation) in which the lab's nodes
//     directory is an empty tmpfs holding only the node's own directory
//     (its data directory, HARVEST_HOME), and /tmp and /run/harvest are
//     the node's own: it cannot see another node's workspaces, disks, box
//     run directories or sockets, nor PostgreSQL's unix socket;
//   - cgroups of its own: in the node's mount namespace a cgroup made for
//     it is bind-mounted over every hierarchy's root, so the cgroups its
//     boxes get (the local backend's /sys/fs/cgroup/…/harvest/…, whose
//     names are the same on every node with the same run directory) are
//     its alone; without that a node taking a session over found the old
//     owner's box's cgroup and tried, forever, to destroy a box that on a
//     separate machine it could not see;
//   - a PID namespace, whose first process holds the namespaces open for
//     the lab's life: harvest serve is started into them with nsenter, so
//     it can be killed and started again as on a machine that stays up,
//     and what outlives it (its boxes) stays on "its machine".
//
// The test process sees every node's directory at the same path the node
// does (below /var/tmp/harvest-netlab-PID-N, not below /tmp, which each
// node has its own of), so a workspace path a node reports is one the
// test can write to. Lab.SharedDir is seen by every node (the
// repositories the test's sessions clone).
//
// Namespaces are made with iproute2's ip, util-linux's unshare and
// nsenter, not netlink from Go: a node's namespaces must be held by a
// process anyway (unshare's --kill-child ties their life to the test
// process's), ip and iptables are what an operator would type to
// reproduce a fault by hand, and no new module is needed. Only the
// sockets the test opens inside a node's namespace (Node.DialContext) and
// PostgreSQL's start go through setns(2) on a locked thread.
//
// # Faults
//
//   - Node.Kill: SIGKILL to the node's harvest serve alone. Nothing of the
//     lab kills its boxes (nothing on a separate machine would): they end
//     themselves, by their fences, at the node's lease deadlines (package
//     session's "Self-fencing": at most TTL−TTL/6 after the kill); the
//     namespaces stay, and Node.Start starts harvest again.
//   - Node.Pause / Resume: SIGSTOP / SIGCONT to harvest serve alone (its
//     boxes are not stopped, as under a process that hangs: they end by
//     their fences while it is paused). Resume also continues
//     the nsenter that started harvest, which stops itself when its child
//     stops (util-linux passes the stop on) and would never reap it.
//   - Node.Partition(peer, direction): iptables DROP rules in the node's
//     own namespace, OUTPUT for Out (the node's packets to the peer), INPUT
//     for In (the peer's to the node), both for Both. A peer is the lab's
//     PostgreSQL or NATS (their TCP port on the lab's address), another
//     node (every packet to or from its address) or the test process.
//     Rules act at once on connections already open. TCP needs both ways,
//     so a one-way partition stalls a TCP connection either way; it stays
//     one-way for datagrams, which is what its test shows.
//   - Node.Loss(p): drops each packet on the node's link with probability
//     p, both ways (iptables' statistic match, random mode).
//   - Node.Heal: flushes the node's rules.
//   - Lab.FreezePostgres / ThawPostgres: SIGSTOP / SIGCONT to the
//     postmaster and every backend. Open connections stay open and new
//     TCP handshakes still complete into the listen backlog, but nothing
//     answers: a database host that hangs.
//   - Lab.StopNATS / StartNATS: nats-server killed (SIGKILL), and started
//     again on the same address and JetStream store.
//
// # Watching the nodes
//
// Node.Procs and Lab.Procs list a node's processes (harvest, its boxes,
// their tools) from the lab's host, by ancestry, a paused node's
// included; Lab.ProcsMatching reads only the command lines of all and the
// ancestry of those it looks for, cheap enough to sample every few tens
// of milliseconds. Boxes cannot write outside their workspace (their
// mounts other than the workspaces are read-only), so TestFailover sees
// which node runs a tool of which session from here: each tool process
// is named after its session (bash's exec -a), and a sampler keeps, per
// session, the spans during which each node ran one. Its acceptance:
// after each fault (kill -9, SIGSTOP past the TTL, a one-way partition
// from PostgreSQL, PostgreSQL frozen past the TTL), the old owner's boxes
// are gone within its deadline plus 1 s (the deadline is at most
// TTL−TTL/6 after the fault), no session's tools ever ran on two nodes at
// once, every message is delivered once and every log is gapless; an
// interrupted turn is turn.failed "interrupted" whichever the fault.
// TestNATSDown kills nats-server for 15 s under 30 sessions with a
// follower of each through every node that does not own it (a and b
// forward streams to the owner, c serves them from NATS, --nats-follow):
// sends forwarded to the owners succeed, API calls answer within the
// store budget, no lease moves, every follower gets every event once
// without reconnecting, and it logs how late they got them (through c,
// natsbus's polling of the store while NATS is down; live again once it
// is back).
//
// The lab's methods fail the test that made the lab (t.Fatal on its
// testing.TB): call them from that test, not from its subtests.
//
// Limits: this kernel has no sch_netem, so there is no delay or
// reordering (tc qdisc … netem fails); loss is a firewall rule, and delay,
// if a test needs it, would take a userspace proxy in the lab's namespace
// (there is none yet). iptables here is iptables-nft (iptables-legacy
// works too; there is no nft binary). The kernel, /dev and the loop
// devices are shared by the nodes (they are not virtual machines): a
// node sees the loop devices another attached, though not the files
// behind them nor their mounts.
//
// # Cleanup
//
// Everything is named after the test process's pid: namespaces
// hl<pid><letter>-lab and hl<pid><letter>-n<i>, links hl<pid><letter>…,
// cgroups hl<pid><letter>-<node> in every hierarchy,
// the directory /var/tmp/harvest-netlab-<pid>-<n>. When the test ends,
// pass or fail (t.Cleanup), each node's PID namespace's first process is
// killed (the kernel kills every process of the namespace with it, its
// boxes included, and the mount namespace and its mounts go with the
// last of them), nats-server is killed, PostgreSQL is thawed and stopped,
// the namespaces are deleted (their links and the bridge go with them),
// the nodes' cgroups removed (deepest first),
// loop devices still attached to files below the lab's directory are
// detached and the directory removed. A test process that dies without
// cleaning up takes its nodes and nats-server along (parent-death
// signals); the next lab to start (New) sweeps what is left of labs whose
// process is gone: the processes still in their namespaces, the
// namespaces, links, cgroups, loop devices and directories.
package netlab
