package session

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// Ids: a session is "s-" and 16 lowercase base32 characters, a message "m-"
// and 16; a session's boxes are named after it ("{session}-" and 6 hex
// digits), which is how Recover tells a session box from any other box of
// the backend and knows whose it is.
var (
	sessionIDPattern = regexp.MustCompile(`^s-[a-z2-7]{16}$`)
	messageIDPattern = regexp.MustCompile(`^m-[a-z2-7]{16}$`)
	boxIDPattern     = regexp.MustCompile(`^(s-[a-z2-7]{16})-[0-9a-f]{6}$`)
)

var lowerBase32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func randomID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + strings.ToLower(lowerBase32.EncodeToString(b[:]))
}

func newSessionID() string { return randomID("s-") }

// DerivedID is a session id made from seed (a webhook delivery's id): the
// same seed gives the same id, so a delivery processed twice creates one
// session (the second Create is a conflict).
func DerivedID(seed string) string {
	sum := sha256.Sum256([]byte("harvest-session\x00" + seed))
	return "s-" + strings.ToLower(lowerBase32.EncodeToString(sum[:10]))
}
func newMessageID() string { return randomID("m-") }

func newBoxID(session string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return session + "-" + hex.EncodeToString(b[:])
}

// ValidID reports whether id has the shape of a session id, so that callers
// can refuse a malformed one (400) before looking it up (404).
func ValidID(id string) bool { return sessionIDPattern.MatchString(id) }

// ValidMessageID reports whether id has the shape of a message id.
func ValidMessageID(id string) bool { return messageIDPattern.MatchString(id) }

// boxSession returns the session a box id belongs to, or "" for a box that
// is not a session's.
func boxSession(boxID string) string {
	m := boxIDPattern.FindStringSubmatch(boxID)
	if m == nil {
		return ""
	}
	return m[1]
}

// turnID names turn n of a session.
func turnID(n int) string { return fmt.Sprintf("t%d", n) }

// runID names the run that holds the session lock during turn n.
func runID(session string, n int) string { return session + "/" + turnID(n) }

func lockKey(session string) string { return "session/" + session }
