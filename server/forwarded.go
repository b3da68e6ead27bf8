package server

import (
	"net"
	"net/http"
	"strings"
)

// Forwarded requests' origin. A node that forwards a request to the
// session's owner (server/cluster) is the owner's peer, so the owner's
// audit log would name the forwarding node's address as the client's. The
// forwarder says who the client was (ForwardedForHeader) and proves it is a
// node with its own node token (NodeAuthHeader, "Bearer SECRET"); the
// owner records the client's address only when that token is a live
// node's, and the forwarding node's id in the entry's detail either way. A
// client that sends the headers itself has no node's token: its own
// address is recorded.

// ForwardedForHeader carries, on a request a node forwards, the address
// of the client it came from.
const ForwardedForHeader = "Harvest-Forwarded-For"

// NodeAuthHeader carries, on a request a node forwards, that node's own
// token ("Bearer SECRET"), which vouches for ForwardedForHeader.
const NodeAuthHeader = "Harvest-Node-Authorization"

// ClientIP is the address of r's peer, without its port: what a
// forwarder puts in ForwardedForHeader.
func ClientIP(r *http.Request) string { return remoteIP(r) }

// forwardedFor is the client's address a live node vouches for on r, or
// "" when r is not forwarded, or not by a node whose token checks out.
func (s *Server) forwardedFor(r *http.Request) string {
	ip := net.ParseIP(strings.TrimSpace(r.Header.Get(ForwardedForHeader)))
	if ip == nil || s.cfg.NodeLive == nil {
		return ""
	}
	scheme, secret, ok := strings.Cut(r.Header.Get(NodeAuthHeader), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return ""
	}
	t, err := s.cfg.Store.TokenByHash(r.Context(), HashToken(strings.TrimSpace(secret)))
	if err != nil {
		return ""
	}
	node, ok := NodeOf(t)
	if !ok {
		return ""
	}
	if live, err := s.cfg.NodeLive(r.Context(), node); err != nil || !live {
		return ""
	}
	return ip.String()
}
