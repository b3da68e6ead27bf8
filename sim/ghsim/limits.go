package ghsim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// GitHub's limits, as it tells them: every authenticated REST answer
// carries x-ratelimit-limit, -remaining, -used, -reset (epoch seconds)
// and -resource ("core"), counted per installation (its tokens), per App
// (its JWTs) and per person (a personal token); an hour's window starts
// at the first request and resets on a whole second, as the header says. Past the limit a request is refused 403 with
// x-ratelimit-remaining: 0 and "API rate limit exceeded for installation
// ID N." (for a person, "... for user ID N."). A secondary limit (set
// through the control API) refuses every request of its scope, REST and
// git, until it ends: 403 or 429, "You have exceeded a secondary rate
// limit...", with Retry-After unless told not to send one. Faults (the
// control API) answer REST requests with a 5xx, or slowly, on demand.
// Control and git requests do not count against the primary limit.

// DefaultRateLimit is an installation's, an App's and a person's hourly
// budget unless SetRateLimit says otherwise.
const DefaultRateLimit = 5000

const (
	primaryDocs   = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
	secondaryDocs = "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
)

// budget is one scope's limits. Guarded by Server.mu.
type budget struct {
	limit, used int
	reset       time.Time // zero: no window started
	secUntil    time.Time
	secStatus   int
	secRetry    bool // send Retry-After
}

// fault is a planned answer to the next matching REST requests.
type fault struct {
	method, path string // "" matches any; path is a prefix, without /api/v3
	status       int    // 0: answer normally (after delay)
	delay        time.Duration
	left         int
}

// scopeOf names whose limits a request counts against: "installation:ID",
// "app:ID", "user:LOGIN", or "" (anonymous, or a credential unknown).
// Called with s.mu held.
func (s *Server) scopeOf(req *http.Request) string {
	var v string
	if _, p, ok := req.BasicAuth(); ok {
		v = p
	} else if scheme, c := credential(req); scheme == "bearer" && strings.Count(c, ".") == 2 {
		var claims struct {
			Iss any `json:"iss"`
		}
		parts := strings.Split(c, ".")
		if decodeSeg(parts[1], &claims) == nil {
			return "app:" + fmt.Sprint(claims.Iss)
		}
		return ""
	} else {
		v = c
	}
	t := s.lookupToken(v)
	switch {
	case t == nil:
		return ""
	case t.kind == tokInstallation:
		return "installation:" + strconv.FormatInt(t.inst.id, 10)
	}
	return "user:" + t.user.login
}

func (s *Server) budgetOf(scope string) *budget {
	if s.limits == nil {
		s.limits = map[string]*budget{}
	}
	b := s.limits[scope]
	if b == nil {
		b = &budget{limit: DefaultRateLimit}
		s.limits[scope] = b
	}
	return b
}

// limit applies the limits and faults to a request before it is served:
// false when it has answered it (a limit or a fault). Called without
// s.mu.
func (s *Server) limit(w http.ResponseWriter, req *http.Request, git bool) bool {
	s.mu.Lock()
	scope := s.scopeOf(req)
	now := s.now()
	var f *fault
	if !git {
		for _, x := range s.faults {
			if x.left > 0 && (x.method == "" || x.method == req.Method) && strings.HasPrefix(req.URL.Path, x.path) {
				x.left--
				f = x
				break
			}
		}
	}
	if scope == "" {
		s.mu.Unlock()
		return s.applyFault(w, req, f)
	}
	b := s.budgetOf(scope)
	if now.Before(b.secUntil) {
		status, retry, until := b.secStatus, b.secRetry, b.secUntil
		s.mu.Unlock()
		if git {
			http.Error(w, "Too Many Requests: you have exceeded a secondary rate limit.", http.StatusTooManyRequests)
			return false
		}
		if retry {
			w.Header().Set("Retry-After", strconv.Itoa(int(until.Sub(now).Round(time.Second)/time.Second)))
		}
		writeError(w, status, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "+
			"If you reach out to GitHub Support for help, please include the request ID "+requestID()+".")
		return false
	}
	if git {
		s.mu.Unlock()
		return true
	}
	if b.reset.IsZero() || !now.Before(b.reset) {
		b.used, b.reset = 0, now.Add(time.Hour).Truncate(time.Second)
	}
	over := b.used >= b.limit
	if !over {
		b.used++
	}
	h := w.Header()
	h.Set("X-Ratelimit-Limit", strconv.Itoa(b.limit))
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(b.limit-b.used))
	h.Set("X-Ratelimit-Used", strconv.Itoa(b.used))
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(b.reset.Unix(), 10))
	h.Set("X-Ratelimit-Resource", "core")
	s.mu.Unlock()
	if over {
		kind, id, _ := strings.Cut(scope, ":")
		who := map[string]string{"installation": "installation ID " + id, "app": "integration ID " + id, "user": "user " + id}[kind]
		writeJSON(w, http.StatusForbidden, apiError{Message: "API rate limit exceeded for " + who + ".", DocumentationURL: primaryDocs, Status: "403"})
		return false
	}
	return s.applyFault(w, req, f)
}

// applyFault waits f's delay and answers its status, if any.
func (s *Server) applyFault(w http.ResponseWriter, req *http.Request, f *fault) bool {
	if f == nil {
		return true
	}
	if f.delay > 0 {
		t := time.NewTimer(f.delay)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
		}
	}
	if f.status == 0 {
		return true
	}
	writeJSON(w, f.status, apiError{Message: http.StatusText(f.status), DocumentationURL: docsURL, Status: strconv.Itoa(f.status)})
	return false
}

// requestID looks like GitHub's X-GitHub-Request-Id.
func requestID() string {
	return strings.ToUpper(newToken("")[:8]) + ":" + strings.ToUpper(newToken("")[:8])
}

// LimitScope names whose limits a spec sets: exactly one of an
// installation, an App, a person.
type LimitScope struct {
	InstallationID int64  `json:"installation_id,omitempty"`
	AppID          int64  `json:"app_id,omitempty"`
	Login          string `json:"login,omitempty"`
}

func (l LimitScope) key(s *Server) (string, error) {
	n := 0
	var k string
	if l.InstallationID != 0 {
		n++
		if s.insts[l.InstallationID] == nil {
			return "", fmt.Errorf("installation %d: %w", l.InstallationID, ErrNotFound)
		}
		k = "installation:" + strconv.FormatInt(l.InstallationID, 10)
	}
	if l.AppID != 0 {
		n++
		if s.apps[l.AppID] == nil {
			return "", fmt.Errorf("app %d: %w", l.AppID, ErrNotFound)
		}
		k = "app:" + strconv.FormatInt(l.AppID, 10)
	}
	if l.Login != "" {
		n++
		u := s.users[strings.ToLower(l.Login)]
		if u == nil {
			return "", fmt.Errorf("user %s: %w", l.Login, ErrNotFound)
		}
		k = "user:" + u.login
	}
	if n != 1 {
		return "", errors.New("name one of installation_id, app_id, login")
	}
	return k, nil
}

// RateLimitSpec sets a scope's primary limit: Remaining requests left of
// Limit until a reset ResetIn seconds from now.
type RateLimitSpec struct {
	LimitScope
	Limit     int `json:"limit,omitempty"` // default DefaultRateLimit
	Remaining int `json:"remaining"`
	ResetIn   int `json:"reset_in"` // seconds, > 0
}

// SetRateLimit sets a scope's primary limit; with Remaining 0 it refuses
// every REST request until the reset.
func (s *Server) SetRateLimit(spec RateLimitSpec) error {
	if spec.Limit == 0 {
		spec.Limit = DefaultRateLimit
	}
	if spec.Limit < 0 || spec.Remaining < 0 || spec.Remaining > spec.Limit || spec.ResetIn <= 0 {
		return fmt.Errorf("rate limit: want 0 <= remaining (%d) <= limit (%d) and reset_in (%d) > 0", spec.Remaining, spec.Limit, spec.ResetIn)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, err := spec.key(s)
	if err != nil {
		return err
	}
	b := s.budgetOf(k)
	b.limit, b.used, b.reset = spec.Limit, spec.Limit-spec.Remaining, s.now().Add(time.Duration(spec.ResetIn)*time.Second).Truncate(time.Second)
	return nil
}

// SecondaryLimitSpec starts a secondary limit on a scope for For seconds,
// answered with Status (403, the default, or 429) and, unless
// NoRetryAfter, a Retry-After of the seconds left.
type SecondaryLimitSpec struct {
	LimitScope
	For          int  `json:"for"`
	Status       int  `json:"status,omitempty"`
	NoRetryAfter bool `json:"no_retry_after,omitempty"`
}

// SetSecondaryLimit starts a secondary limit.
func (s *Server) SetSecondaryLimit(spec SecondaryLimitSpec) error {
	if spec.Status == 0 {
		spec.Status = http.StatusForbidden
	}
	if spec.For <= 0 || (spec.Status != http.StatusForbidden && spec.Status != http.StatusTooManyRequests) {
		return fmt.Errorf("secondary limit: want for (%d) > 0 seconds and status 403 or 429 (%d)", spec.For, spec.Status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, err := spec.key(s)
	if err != nil {
		return err
	}
	b := s.budgetOf(k)
	b.secUntil, b.secStatus, b.secRetry = s.now().Add(time.Duration(spec.For)*time.Second), spec.Status, !spec.NoRetryAfter
	return nil
}

// FaultSpec plans the answers to the next Count REST requests matching
// Method and Path (a prefix, as GitHub's paths read, without /api/v3;
// empty matches all): after DelayMS, Status (a 5xx; 0 answers normally,
// only slowly).
type FaultSpec struct {
	Method  string `json:"method,omitempty"`
	Path    string `json:"path,omitempty"`
	Status  int    `json:"status,omitempty"`
	DelayMS int    `json:"delay_ms,omitempty"`
	Count   int    `json:"count"`
}

// AddFault plans faults; they are used in the order they were added.
func (s *Server) AddFault(spec FaultSpec) error {
	if spec.Count <= 0 || spec.DelayMS < 0 || (spec.Status != 0 && (spec.Status < 500 || spec.Status > 599)) || (spec.Status == 0 && spec.DelayMS == 0) {
		return errors.New("fault: want count > 0 and a 5xx status, a delay_ms, or both")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: strings.ToUpper(spec.Method), path: spec.Path, status: spec.Status,
		delay: time.Duration(spec.DelayMS) * time.Millisecond, left: spec.Count})
	return nil
}

func (s *Server) limitRoutes(m *http.ServeMux) {
	const p = "/_sim/github/"
	m.HandleFunc("POST "+p+"rate-limits", control(noResult(s.SetRateLimit)))
	m.HandleFunc("POST "+p+"secondary-limits", control(noResult(s.SetSecondaryLimit)))
	m.HandleFunc("POST "+p+"faults", control(noResult(s.AddFault)))
}
