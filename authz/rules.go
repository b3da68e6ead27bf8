package authz

import (
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// Level is what a subject may do with a session or on a repository.
type Level int8

const (
	// None: the session does not exist for them (404).
	None Level = iota
	// Read: get, list, the log, the lock, the event stream, the diff.
	Read
	// Write: send, cancel, stop, delete, the shell; on a repository,
	// start sessions.
	Write
)

func (l Level) String() string {
	switch l {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "none"
}

// Subject is who makes a request.
type Subject struct {
	// User is the token's user ("" for a node's token, which is no one's).
	User string
	// Token is the token's id.
	Token string
	// Role is the user's role.
	Role store.Role
	// Admin is whether the request acts as an admin: an admin token of an
	// admin user (package server's caller.admin).
	Admin bool
}

// limit is the most a role lets a user do with any session: a viewer
// reads, whatever the repository says.
func (sub Subject) limit() Level {
	switch {
	case sub.Admin:
		return Write
	case sub.Role == store.RoleViewer:
		return Read
	case sub.Role == store.RoleMember || sub.Role == store.RoleAdmin:
		return Write
	}
	return None
}

// Owns says whether s is sub's own session: its user's, or, for a
// session of before users (no user), the token's that made it.
func (sub Subject) Owns(s *store.Session) bool {
	if s.User != "" {
		return sub.User != "" && s.User == sub.User
	}
	return sub.Token != "" && s.Owner == sub.Token
}

// Grant is what a subject may do on one repository.
type Grant struct {
	// Level is the subject's level on the repository.
	Level Level
	// Shared says whether Level reaches other people's sessions on it.
	// False for an unshared repository (see the package doc): Level then
	// only says whether the subject may start sessions there.
	Shared bool
	// Why, for a Level below Write, says why, for a refusal's message
	// ("@ada has read access to acme/calc on GitHub").
	Why string
}

// Session is sub's level on a session: own says whether it is theirs
// (Subject.Owns), grants are sub's grants on its repositories, in any
// order.
func Session(sub Subject, own bool, grants []Grant) Level {
	max := sub.limit()
	if sub.Admin || own {
		return max
	}
	if len(grants) == 0 {
		return None
	}
	l := Write
	for _, g := range grants {
		if !g.Shared {
			return None
		}
		l = min(l, g.Level)
	}
	return min(l, max)
}

// Start says whether sub may start a session on repositories with grants
// (named by repos, in the same order): nil, or an error that says why
// not and what to do.
func Start(sub Subject, repos []string, grants []Grant) error {
	if sub.Admin {
		return nil
	}
	if sub.limit() < Write {
		return fmt.Errorf("user %s is a %s: viewers read sessions, they do not start them (an admin makes you a member: harvest user set-role %s member)", sub.User, sub.Role, sub.User)
	}
	for i, g := range grants {
		if g.Level < Write {
			msg := fmt.Sprintf("you may not start sessions on %s: that needs write access to it", repos[i])
			if g.Why != "" {
				msg += " (" + g.Why + ")"
			}
			return fmt.Errorf("%s", msg)
		}
	}
	return nil
}
