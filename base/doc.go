// Package base holds no code: its subpackages are Harvest's ground floor,
// the low-level helpers the sandbox, the agents and the proxies build on.
//
//	procutil  host processes named safely across pid reuse; reaping a child
//	unixsock  unix sockets at paths of any length
//	boxhttp   serving an http.Handler on a listener bridged into a box
//	tracing   adding spans to the trace of the context, when there is one
//
// They import the standard library, golang.org/x/sys and the
// OpenTelemetry API, and nothing of Harvest's above them: the sandbox
// contract and the in-box binary link them, so they must stay small, and
// anything may use them. They lived in internal/ next to the CLI, the top
// floor; here the tree reads in the order it is built.
// internal/deptest's TestFloors holds every package of the module to its
// floor (FLOORS), this one the lowest.
package base
