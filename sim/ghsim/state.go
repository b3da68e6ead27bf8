package ghsim

import (
	"crypto/rsa"
	"time"
)

// The domain: what the stand-in stores. Everything here is guarded by
// Server.mu; wire shapes (wire.go) are built from it under the same lock.

// Permission is a user's role on a repository, weakest first.
type Permission string

// Repository roles, as GitHub's collaborator permission endpoint names them.
const (
	PermNone  Permission = "none"
	PermRead  Permission = "read"
	PermWrite Permission = "write"
	PermAdmin Permission = "admin"
)

func (p Permission) rank() int {
	switch p {
	case PermRead:
		return 1
	case PermWrite:
		return 2
	case PermAdmin:
		return 3
	}
	return 0
}

func (p Permission) valid() bool { return p == PermNone || p.rank() > 0 }

// levelRank orders an App permission level ("read" < "write" < "admin").
func levelRank(l string) int { return Permission(l).rank() }

type user struct {
	id      int64
	login   string
	typ     string // User, Organization, Bot
	name    string
	email   string
	public  bool   // email is the profile's public email
	pat     string // "" for bots and organizations
	created time.Time
}

type app struct {
	id          int64
	slug        string
	name        string
	owner       *user
	key         *rsa.PublicKey
	webhookURL  string
	secret      string
	hookID      int64
	permissions map[string]string
	events      []string
	bot         *user // slug[bot], the author of what its tokens write
	badSig      bool  // deliveries carry a wrong signature
	created     time.Time
	// The user authorization (oauth.go).
	clientID     string
	clientSecret string
	callbacks    []string
}

type installation struct {
	id      int64
	app     *app
	account *user
	perms   map[string]string // granted: the app's, or fewer until accepted
	// selected: nil covers every repository of the account ("all");
	// else only these ("selected").
	selected    map[int64]bool
	suspendedBy *user
	suspendedAt time.Time
	created     time.Time
	updated     time.Time
}

// covers reports whether the installation reaches r.
func (in *installation) covers(r *repo) bool {
	return r.owner == in.account && (in.selected == nil || in.selected[r.id])
}

type tokenKind int

const (
	tokInstallation tokenKind = iota + 1
	tokPAT
	tokUser // a user-to-server token (ghu_...): an App acting for a person (oauth.go)
)

type token struct {
	kind    tokenKind
	value   string
	inst    *installation     // tokInstallation
	repos   map[int64]bool    // tokInstallation: nil means every repo of the account
	perms   map[string]string // tokInstallation
	user    *user             // tokPAT, tokUser
	app     *app              // tokUser: the App the person authorized
	expires time.Time         // tokInstallation, tokUser
}

type repo struct {
	id            int64
	owner         *user
	name          string
	private       bool
	defaultBranch string
	description   string
	created       time.Time
	pushed        time.Time
	protected     map[string]bool
	perms         map[string]Permission // login → role; the owner is admin
	nextNumber    int                   // issues and PRs share it
	issues        map[int]*issue
	branches      map[string]string // name → sha, refreshed after every push
	labels        map[string]*label // lower(name) → the repository's label, made when first used
	parent        *repo             // a fork's: the repository it was forked from (nil: not a fork)
}

func (r *repo) fullName() string { return r.owner.login + "/" + r.name }

type label struct {
	id    int64
	name  string
	color string
}

type issue struct {
	id        int64
	repo      *repo
	number    int
	title     string
	body      string
	user      *user
	app       *app // set when written with an installation token
	state     string
	labels    []*label
	assignees []*user
	created   time.Time
	updated   time.Time
	closed    time.Time
	comments  []*comment
	reactions []*reaction
	pr        *pull // non-nil: this issue is a pull request
}

type pull struct {
	id        int64
	head      string // branch name in headRepo
	headRepo  *repo  // the repository of head: the pull request's own, or a fork of it
	headSHA   string
	base      string
	baseSHA   string // the base branch's sha when last computed
	draft     bool
	review    []*reviewComment
	reviews   []*review
	maintMod  bool
	closedBy  *user
	requested []*user // requested reviewers
	mergedSHA string
	merged    bool
	mergedBy  *user
	mergedAt  time.Time
}

// review is a submitted pull request review: every review comment
// belongs to one (a single comment makes a review of its own, as on
// GitHub).
type review struct {
	id        int64
	pr        *issue
	user      *user
	body      string
	state     string // COMMENTED, APPROVED, CHANGES_REQUESTED
	commitID  string
	submitted time.Time
	comments  []*reviewComment
}

type comment struct {
	id        int64
	issue     *issue
	body      string
	user      *user
	app       *app
	created   time.Time
	updated   time.Time
	reactions []*reaction
}

type reviewComment struct {
	id        int64
	pr        *issue
	body      string
	user      *user
	app       *app
	path      string
	line      int
	commitID  string
	diffHunk  string
	inReplyTo int64
	review    *review
	created   time.Time
	updated   time.Time
	reactions []*reaction
}

type reaction struct {
	id      int64
	user    *user
	content string
	created time.Time
}

type checkSuite struct {
	id      int64
	repo    *repo
	app     *app
	headSHA string
	branch  string
	status  string
	concl   string
	runs    []*checkRun
	created time.Time
	updated time.Time
}

type checkRun struct {
	id       int64
	suite    *checkSuite
	name     string
	status   string // queued, in_progress, completed
	concl    string
	external string
	details  string
	title    string
	summary  string
	text     string
	started  time.Time
	done     time.Time
}

// reactionContents are the reactions GitHub accepts.
var reactionContents = []string{"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}
