package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// TokenPrefix starts every API token secret, so a leaked one is easy to
// recognise (and to scan for).
const TokenPrefix = "hvt_"

// NewToken makes an API token: the secret to hand out once, and the record
// to store (which keeps only the secret's SHA-256).
func NewToken(name string, admin bool, now time.Time) (secret string, t *store.Token) {
	var id [6]byte
	var key [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	rand.Read(key[:])
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(key[:])
	return secret, &store.Token{ID: "tok-" + hex.EncodeToString(id[:]), Name: name, Hash: HashToken(secret), Admin: admin, CreatedAt: now.UTC()}
}

// HashToken is what the store keeps of a secret.
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Node tokens. With several nodes on one store (harvest serve --node-id),
// a request for a session another node owns is forwarded to that node
// with the client's own token. A node that acts on such a session with no
// client's request behind it (the GitHub app's follow-up messages, which
// arrive as webhook deliveries on any node) sends the request to the owner
// with a token of its own instead:
//
//   - made by the node at its start (NewNodeToken): an admin token named
//     NodeTokenPrefix and the node's id, whose secret is kept only in the
//     node's memory (the store keeps its SHA-256, as of any token);
//   - accepted only while its node is live (Config.NodeLive: its heartbeat
//     has not run out), so a dead node's token is worth nothing even
//     before it is deleted;
//   - accepted only on the routes a node sends (POST
//     /v1/sessions/{id}/messages, .../cancel and .../stop): 403 on any
//     other, and it never signs in;
//   - the only token that may name the sender an idempotency key belongs
//     to (NodeSenderHeader), so that a message the GitHub app sends is
//     keyed as the app's on whichever node stores it, and a retry from
//     any node never stores it twice;
//   - deleted when its node stops, and by any node once its node's
//     heartbeat ran out (a node killed with SIGKILL).
//
// No API call or command makes one: names with the prefix are refused
// (CheckTokenName).
const NodeTokenPrefix = store.NodeTokenPrefix

// NodeSenderHeader names, on a node's forwarded send, whose idempotency
// key the message's Idempotency-Key is (the GitHub app's: "github"),
// instead of the token's. Only a node token may give it.
const NodeSenderHeader = "Harvest-Sender"

// NewNodeToken makes the token of node (its id, as in the store's node
// list): the secret to keep in memory, and the record to store.
func NewNodeToken(node string, now time.Time) (secret string, t *store.Token) {
	return NewToken(NodeTokenPrefix+node, true, now)
}

// NodeOf says whether t is a node's token (NewNodeToken), and whose.
func NodeOf(t *store.Token) (node string, ok bool) {
	node, ok = strings.CutPrefix(t.Name, NodeTokenPrefix)
	return node, ok && node != ""
}

// CheckTokenName refuses the names a person's token may not have: those of
// nodes' tokens.
func CheckTokenName(name string) error {
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(name)), NodeTokenPrefix) {
		return fmt.Errorf("token names starting with %q are reserved for the tokens nodes make for themselves: choose another", NodeTokenPrefix)
	}
	return nil
}

// validSender is the shape of a NodeSenderHeader: a name like "github",
// never a token's id (a node does not key messages as a person).
var validSender = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// nodeRoute says whether a node's token may call rt: what the GitHub
// side does to a session another node owns (a follow-up message, "@bot
// stop", a merged or closed pull request).
func nodeRoute(rt route) bool {
	if rt.method != http.MethodPost {
		return false
	}
	switch rt.path {
	case "/v1/sessions/{id}/messages", "/v1/sessions/{id}/cancel", "/v1/sessions/{id}/stop":
		return true
	}
	return false
}

// caller is who made a request.
type caller struct {
	token *store.Token
	// web is the sign-in cookie's secret when the request authenticated
	// with it (websession.go), else "".
	web string
	// node is the node whose token this is (NewNodeToken), else "".
	node string
	// via is how a user's own sign-in was made (store.WebViaGitHub,
	// WebViaOIDC): then token is the user itself (callerForUser), not a
	// token. "" for a token.
	via string
}

// userSignIn says whether the request is a user's own sign-in (no token).
func (c caller) userSignIn() bool { return c.via != "" }

// owner is the owner argument of the Manager's calls: "" (everything) for
// an admin, else the token's id.
func (c caller) owner() string {
	if c.admin() {
		return ""
	}
	return c.token.ID
}

// admin says whether the request may do what an admin does: the token is
// an admin's and so is its user (a node's token, no one's, is an admin's).
// A user made a member keeps their admin tokens, which act as a member's
// until the user is an admin again; a member's token is never made admin
// (createToken).
func (c caller) admin() bool {
	return c.token.Admin && (c.token.User == "" || c.token.Role == store.RoleAdmin)
}

// userOK refuses a token whose user is disabled: at once, on the request
// after the change (the user's disabled is read with the token).
func userOK(t *store.Token) *apiError {
	if t.Disabled {
		return errorf(http.StatusUnauthorized, CodeUnauthorized, fmt.Sprintf("token %s belongs to user %s, who is disabled: an admin enables them again (harvest user enable %s)", t.ID, t.User, t.User))
	}
	return nil
}

// authenticate finds the token of a request's "Authorization: Bearer",
// or, without one, of its sign-in cookie (websession.go).
func (s *Server) authenticate(r *http.Request) (caller, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if ck, err := r.Cookie(SessionCookie); err == nil && ck.Value != "" {
			return s.cookieCaller(r, ck.Value)
		}
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized,
			"no token: send Authorization: Bearer TOKEN (harvest serve writes an admin token to DATA/admin-token on first start; harvest token create makes more)")
	}
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "the Authorization header is not \"Bearer TOKEN\": send the token as a bearer token")
	}
	t, err := s.cfg.Store.TokenByHash(r.Context(), HashToken(secret))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "unknown token: it was deleted or mistyped; use the one in DATA/admin-token or make one with harvest token create")
	case err != nil:
		return caller{}, storeFailed("checking the token", err)
	}
	if node, ok := NodeOf(t); ok {
		return s.nodeCaller(r, t, node)
	}
	if e := userOK(t); e != nil {
		return caller{}, e
	}
	return caller{token: t}, nil
}

// nodeCaller accepts node's token t while node is live.
func (s *Server) nodeCaller(r *http.Request, t *store.Token, node string) (caller, *apiError) {
	if s.cfg.NodeLive == nil {
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, fmt.Sprintf("token %s is node %s's, and this server is not one of several nodes (harvest serve --node-id): it takes no node's token", t.ID, node))
	}
	live, err := s.cfg.NodeLive(r.Context(), node)
	if err != nil {
		return caller{}, storeFailed("checking the node of token "+t.ID, err)
	}
	if !live {
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, fmt.Sprintf("token %s is node %s's, which is not live (its heartbeat ran out, or it left): a node's token is valid only while its node runs", t.ID, node))
	}
	return caller{token: t, node: node}, nil
}
