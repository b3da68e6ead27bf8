// Package netguard is the one address policy for connections Harvest's
// host makes on behalf of someone it does not fully trust: a session's
// remote MCP servers, a repository's .mcp.json, and the egress proxy's
// targets (which uses Public and the same list of ranges).
//
// # Why
//
// The host sits on a network its users do not: its own loopback services
// (the API's admin side, databases, a Docker socket proxy), its
// neighbours on the private network, and the cloud's metadata service at
// 169.254.169.254 (fd00:ec2::254), which hands out the machine's
// credentials to whoever asks. A URL a user gives, followed from the
// host, reaches all of them: server-side request forgery. So a host the
// guard dials must lead to public addresses only; loopback, private
// (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10), link-local
// (169.254/16, fe80::/10) and reserved ranges are refused (Forbidden
// lists them, with why each is there), an IPv4 address written as IPv6
// (::ffff:a.b.c.d, 6to4 2002::/16, NAT64 64:ff9b::/96) is judged by the
// IPv4 address inside.
//
// # What is checked, and when
//
// A name is resolved once and every address it gives is checked; the
// connection is then made to exactly those addresses, never to the name
// again, so a name that answers a public address to the check and
// 127.0.0.1 to the dial (DNS rebinding) gets nowhere. The check runs at
// every dial (Guard.DialContext, and Transport, whose every connection,
// the ones after a redirect included, is a DialContext), and CheckURL
// runs it ahead of time, so a request can be refused with a 400 before
// anything is stored or dialed.
//
// A name is refused when ANY of its addresses is forbidden (and not
// allowed), not only when all are. The egress proxy keeps the public
// addresses of a mixed answer instead: it fetches packages from CDNs for
// a box, where one odd record must not break an install, and it dials a
// fixed allowlist of names. Here the names are anyone's, and a name that
// leads both outside and into the host's network is a mistake or an
// attack; refusing it outright gives the same answer at CheckURL and at
// every dial, whichever address a resolver lists first.
//
// # Allowances
//
// The operator may trust some internal servers (an MCP server on the
// company network, one on the host itself): Config.Allow, harvest serve's
// --mcp-allow. Each entry is one of
//
//	mcp.internal           a host name: whatever it resolves to is dialed
//	mcp.internal:8080      the same, at that port only
//	10.1.2.3, [fd00::5]    an address (the brackets only with a port)
//	10.1.2.3:8080          an address at a port; [fd00::5]:8080 for IPv6
//	10.0.0.0/8             a network (CIDR), at any port
//	10.0.0.0/8:8080        a network at a port; [fd00::/8]:8080 for IPv6
//
// A name allowance trusts the name's DNS; an address or network one
// allows those addresses whatever name leads there (`localhost` resolves
// to 127.0.0.1 and ::1, so allowing 127.0.0.1 alone still refuses it:
// allow the name, or both addresses). 0.0.0.0/0 and ::/0 together turn
// the check off, for an installation whose every user is trusted.
//
// A nil *Guard is the default policy with no allowances, so a caller
// that forgets to pass one gets the strict policy, not none.
package netguard
