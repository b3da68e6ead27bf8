// Package gitproxy is the only way git in a box reaches GitHub: a
// smart-HTTP git server on the host that takes a per-session credential,
// applies the session's push policy to the ref updates of each push, and
// forwards what it allows to the upstream with the real token added on the
// host.
//
// # Why
//
// Agents run git fetch and git push as they always do. A box has no
// network, and whatever is in a box must be assumed to leak, so it never
// holds a GitHub token. The session layer serves this proxy on a loopback
// listener inside the box (sandbox.Sandbox.Listen, bridged by the in-box
// agent, as the model proxy is) and gives the box's commands BoxEnv: git
// configuration in environment variables that rewrites
// https://github.com/owner/name(.git) — and the git@github.com: spellings —
// to that listener, with the session's token as the Basic password.
//
//	box: git push origin ─► url.insteadOf ─► http://x-harvest:TOKEN@127.0.0.1:PORT/owner/name.git
//	        │ (loopback in the box)
//	        ▼
//	in-box listener ══ bridge ══► host: Proxy.Serve
//	        route: /owner/name(.git)/info/refs | git-upload-pack | git-receive-pack (else 404)
//	        token: Basic password, a live grant's, on its listener (else 401 + WWW-Authenticate)
//	        repo:  one the grant lists (else 404, OnRefuse)
//	        push:  command list read and checked (else a git "ng" answer, OnRefuse;
//	               nothing forwarded, the rest of the body drained)
//	        ▼
//	upstream (https://github.com/owner/name.git): Basic x-access-token:<Repo.Token()>
//	        ◄── answer streamed back, the token masked; a push's report-status
//	            read on the way → OnPush
//
// Why a proxy rather than bundles (the host fetching into a bundle for the
// box, and pushing the bundles the box makes): with a proxy the agent uses
// git unchanged, fetches whenever it likes, and gets git's own answer to a
// push — a refusal is a "! [remote rejected] … (reason)" line in the
// agent's own loop, which it reads and acts on, not an out-of-band message
// after the fact. The policy is applied to the very bytes that are then
// forwarded (the buffered command list plus the rest of the body,
// unchanged), so there is no gap between what was checked and what was
// pushed. And nothing is copied in or out of the box.
//
// # The box's configuration
//
// BoxEnv returns GIT_CONFIG_COUNT / GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n,
// so nothing is written into an agent-writable .git/config (package
// workspace drops [url] and [credential] sections from it anyway): the
// clone's remote.origin.url stays https://github.com/owner/name.git.
// git remote -v and git remote get-url expand insteadOf, so they show the
// loopback URL, with the token: no git configuration keeps those looking
// like GitHub short of intercepting TLS. The token is visible in the box —
// in its environment and in those commands' output — by design: it is worth
// something only against this proxy, only for the session's repositories
// under its policy, only on its box's listener (Grant.Listener), and only
// until revoked. The upstream token never enters the box.
//
// # Protocol
//
// Served: GET info/refs?service=git-upload-pack|git-receive-pack, POST
// git-upload-pack, POST git-receive-pack (dumb HTTP is refused). Upload-pack
// is forwarded as sent — protocol v2 included (the Git-Protocol header is
// passed on), gzip'd bodies with their Content-Encoding — and streamed both
// ways. Receive-pack (protocol v0/v1; git has no v2 push) is read as far as
// its command list: shallow lines, "old new ref\0capabilities", the other
// commands, a flush, and the push options when the client asked for them;
// a gzip'd body is decoded (and forwarded decoded). A lone flush — git's
// credential probe before a push larger than http.postBuffer — has no
// command and is forwarded. Signed pushes are refused. Bodies are never
// held whole: at most the command list (1 MiB), then the rest streams to
// the upstream as it arrives, chunked when its length is not known.
// Config.MaxBodyBytes bounds a body as sent, and a push's after decoding.
//
// A refused push is answered as a git server answers one: 200,
// application/x-git-receive-pack-result, "unpack ok" and "ng <ref>
// <reason>" for every ref, on side-band 1 when the client asked for
// side-band-64k, with each reason also on band 2, which git prints as
// "remote: harvest: …". The proxy's other refusals (401, 403, 404) are
// text/plain, which git prints as "remote: " lines before its own error.
//
// # Policy
//
// A fetch may read any repository of the grant. A push may update, in a
// repository of the grant that is not ReadOnly, only refs/heads/<b> where b
// is one of Repo.Branches (exact names), is not Repo.DefaultBranch (even
// when listed), and is not protected (Repo.Protected; an error checking it
// refuses). Deletes, tags and any other ref are refused. A push is all or
// nothing: when one ref is refused, none is forwarded, and the others are
// answered RefusedWithOthers. Each reason says what to do instead ("push
// to harvest/sess-abc"). What the upstream then refuses itself (its hooks,
// its branch rules) reaches the box as the upstream said it, and OnPush
// reports those refs not landed.
//
// # Credentials
//
// Grant returns a token ("harvest-git-" and 256 random bits); the proxy
// keeps its SHA-256 and finds the grant by it (the comparison is of
// hashes, in constant time), never logs it, and accepts it only as the
// Basic password. A missing, unknown or revoked token is 401 with
// WWW-Authenticate, which git reports as "Authentication failed". Revoking
// cancels the grant's upstream requests in flight.
//
// Upstream, the proxy sends only the headers git's protocol needs
// (Content-Type, Accept, Git-Protocol, User-Agent, Content-Encoding) and
// HTTP Basic x-access-token:<Repo.Token()>, asked for on every request.
// The token is never put in a URL, a log line or an error. Back to the box
// go only Content-Type and the cache headers, and the body, with the token
// and its Basic form masked by '*' of the same length wherever they appear
// (so framing and pack lengths stay right; a pack that held the token would
// fail its checksum in the box rather than carry it there). An upstream
// 401 is the host's credential failing: the box gets 502 with a message
// for the operator, not a password prompt.
//
// # Concurrency
//
// A Proxy is safe for concurrent use; one serves every session, on any
// number of listeners. Proxy.mu guards the token table only and is never
// held while calling out. The proxy starts one goroutine of its own: Serve's
// http.Server, which Serve waits for, and Serve returns only once every
// handler has returned (it counts them: http.Server does not). Each request
// runs on its handler goroutine; net/http's transport writes the forwarded
// body on a goroutine of its own, which ends with the upstream request. Every
// blocking call takes the request's context, which ends with the box's
// connection, Serve's context, the grant's revocation and
// Config.RequestTimeout: the upstream request, Repo.Token, Repo.Protected.
// Reading the box's body is bounded by MaxBodyBytes and ends when Serve
// closes the connection. OnPush and OnRefuse run on the request's goroutine
// (OnPush after the box has the whole answer), so they must be quick.
package gitproxy
