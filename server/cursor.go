package server

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// GET /v1/sessions pages by keyset, not offset: a cursor names the last
// session of a page (its creation time as the store holds it, in
// nanoseconds, and its id), and the next page is the sessions after it in the
// list's order (store.SessionFilter.After). A page then costs the same
// wherever it starts (an index seek), and sessions created or deleted
// between two requests neither repeat nor skip the ones after the cursor.
//
// The cursor is opaque to callers: base64url of "1.<nanoseconds>.<id>" (1 is
// its format's version, so the format can change and old cursors still be
// told apart). It carries no filter: a caller sends the same filters with
// every page.

const cursorVersion = "1"

func makeCursor(k store.SessionKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + "." + strconv.FormatInt(k.CreatedAt.UnixNano(), 10) + "." + k.ID))
}

func parseCursor(c string) (*store.SessionKey, error) {
	if c == "" {
		return nil, errors.New("empty")
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, errors.New("not a cursor this server gave out")
	}
	v, rest, ok := strings.Cut(string(b), ".")
	if !ok || v != cursorVersion {
		return nil, errors.New("not a cursor this server gave out (or one of an older version)")
	}
	ns, id, ok := strings.Cut(rest, ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || n < 0 || id == "" || len(id) > 200 || strings.ContainsAny(id, " \t\r\n\x00") {
		return nil, errors.New("not a cursor this server gave out")
	}
	return &store.SessionKey{CreatedAt: time.Unix(0, n).UTC(), ID: id}, nil
}
