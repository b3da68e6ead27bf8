package ghsim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// Webhooks. An action (REST or the control API) queues a delivery to every
// App installed on the repository's owner that has a webhook URL and is
// subscribed to the event (an App with no events listed gets every event).
// One goroutine, owned by the Server, sends them in order; an action never
// waits for its delivery, so a receiver may call the REST API back while
// handling one. Tests wait with WaitDeliveries or WaitDelivery.

// DeliveryState is where a delivery is.
type DeliveryState string

// Delivery states.
const (
	DeliveryPending   DeliveryState = "pending"   // queued, not yet sent
	DeliveryDelivered DeliveryState = "delivered" // the receiver answered (any status)
	DeliveryFailed    DeliveryState = "failed"    // no answer: refused, timed out, or the server closed
)

// Delivery is one webhook sent (or to be sent), as kept in the delivery log.
type Delivery struct {
	ID             int64           `json:"id"`   // unique per attempt
	GUID           string          `json:"guid"` // X-GitHub-Delivery; a redelivery keeps it
	Event          string          `json:"event"`
	Action         string          `json:"action"`
	Kind           WebhookKind     `json:"kind"`
	AppID          int64           `json:"app_id"`
	InstallationID int64           `json:"installation_id"`
	RepositoryID   int64           `json:"repository_id"`
	URL            string          `json:"url"`
	Redelivery     bool            `json:"redelivery"`
	BadSignature   bool            `json:"bad_signature"`
	Header         http.Header     `json:"request_headers"`
	Payload        json.RawMessage `json:"payload"`
	State          DeliveryState   `json:"state"`
	StatusCode     int             `json:"status_code"` // 0 unless delivered
	Error          string          `json:"error,omitempty"`
	DeliveredAt    time.Time       `json:"delivered_at"`
	Duration       time.Duration   `json:"duration"`
}

// deliveries is the log and the queue; guarded by Server.mu.
type deliveries struct {
	log     []*Delivery
	queue   []*Delivery
	wake    chan struct{} // buffered 1: the worker has something to do
	changed chan struct{} // closed (and replaced) whenever a delivery finishes
	closed  bool
}

func (d *deliveries) init() {
	d.wake = make(chan struct{}, 1)
	d.changed = make(chan struct{})
}

func (d *deliveries) close() {}

// broadcast wakes waiters. Called with Server.mu held.
func (d *deliveries) broadcast() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (s *Server) deliverLoop() {
	for {
		s.mu.Lock()
		if len(s.hooks.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.hooks.wake:
				continue
			case <-s.ctx.Done():
				s.failPending()
				return
			}
		}
		d := s.hooks.queue[0]
		s.hooks.queue = s.hooks.queue[1:]
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, d.URL, bytes.NewReader(d.Payload))
		if err == nil {
			req.Header = d.Header.Clone()
		}
		s.mu.Unlock()

		start := time.Now()
		status, errMsg := 0, ""
		if err != nil {
			errMsg = err.Error()
		} else if resp, err := s.hookc.Do(req); err != nil {
			errMsg = err.Error()
		} else {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			status = resp.StatusCode
		}
		dur := time.Since(start)

		s.mu.Lock()
		d.Duration, d.DeliveredAt, d.StatusCode, d.Error = dur, s.now(), status, errMsg
		d.State = DeliveryDelivered
		if errMsg != "" {
			d.State = DeliveryFailed
		}
		s.hooks.broadcast()
		s.mu.Unlock()
		s.logger.Info("webhook", "event", d.Event, "action", d.Action, "guid", d.GUID, "status", status, "err", errMsg)
	}
}

// failPending marks what Close left unsent.
func (s *Server) failPending() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.hooks.queue {
		d.State, d.Error = DeliveryFailed, "server closed"
	}
	s.hooks.queue = nil
	s.hooks.closed = true
	s.hooks.broadcast()
}

// Deliveries returns the delivery log, oldest first (copies).
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.hooks.log))
	for i, d := range s.hooks.log {
		out[i] = *d
	}
	return out
}

// WaitDeliveries waits until every queued delivery has been sent (or has
// failed) and returns the log.
func (s *Server) WaitDeliveries(ctx context.Context) ([]Delivery, error) {
	for {
		s.mu.Lock()
		idle := len(s.hooks.queue) == 0 && !slices.ContainsFunc(s.hooks.log, func(d *Delivery) bool { return d.State == DeliveryPending })
		ch := s.hooks.changed
		s.mu.Unlock()
		if idle {
			return s.Deliveries(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// WaitDelivery waits for a finished delivery that match accepts and
// returns it.
func (s *Server) WaitDelivery(ctx context.Context, match func(Delivery) bool) (Delivery, error) {
	for {
		s.mu.Lock()
		ch := s.hooks.changed
		for _, d := range s.hooks.log {
			if d.State != DeliveryPending && match(*d) {
				s.mu.Unlock()
				return *d, nil
			}
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Delivery{}, ctx.Err()
		}
	}
}

// Redeliver sends delivery id again with the same X-GitHub-Delivery and
// payload, as GitHub's "Redeliver" does, and returns the new attempt's id.
func (s *Server) Redeliver(id int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.hooks.log {
		if d.ID != id {
			continue
		}
		a := s.apps[d.AppID]
		nd := &Delivery{ID: s.newID(), GUID: d.GUID, Event: d.Event, Action: d.Action, Kind: d.Kind,
			AppID: d.AppID, InstallationID: d.InstallationID, RepositoryID: d.RepositoryID, URL: a.webhookURL,
			Redelivery: true, Payload: d.Payload, State: DeliveryPending}
		nd.Header, nd.BadSignature = s.hookHeader(a, nd)
		s.enqueue(nd)
		return nd.ID, nil
	}
	return 0, fmt.Errorf("delivery %d: %w", id, ErrNotFound)
}

// SetBadSignature makes the App's deliveries from now on carry wrong
// signatures (on), or right ones again (off).
func (s *Server) SetBadSignature(appID int64, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[appID]
	if a == nil {
		return fmt.Errorf("app %d: %w", appID, ErrNotFound)
	}
	a.badSig = on
	return nil
}

// SetWebhookURL changes where an app's deliveries go (its webhook URL on
// the app's settings page), as for a receiver that starts after the app
// is registered. The URL is an absolute http or https URL, or "" for no
// deliveries; deliveries already queued keep the URL they were queued with.
func (s *Server) SetWebhookURL(appID int64, url string) error {
	if err := checkWebhookURL(url); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[appID]
	if a == nil {
		return fmt.Errorf("app %d: %w", appID, ErrNotFound)
	}
	a.webhookURL = url
	return nil
}

// checkWebhookURL accepts "" (no deliveries) or an absolute http(s) URL.
func checkWebhookURL(u string) error {
	if u == "" {
		return nil
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("webhook URL %q: want an absolute http or https URL", u)
	}
	return nil
}

func (s *Server) enqueue(d *Delivery) {
	s.hooks.log = append(s.hooks.log, d)
	if s.hooks.closed {
		d.State, d.Error = DeliveryFailed, "server closed"
		return
	}
	s.hooks.queue = append(s.hooks.queue, d)
	select {
	case s.hooks.wake <- struct{}{}:
	default:
	}
}

// Sign returns GitHub's X-Hub-Signature-256 value for body.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func signSHA1(secret string, body []byte) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(body)
	return "sha1=" + hex.EncodeToString(m.Sum(nil))
}

func newGUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *Server) hookHeader(a *app, d *Delivery) (http.Header, bool) {
	secret := a.secret
	if a.badSig {
		secret = "not-" + secret
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "GitHub-Hookshot/harvest-ghsim")
	h.Set("X-GitHub-Event", d.Event)
	h.Set("X-GitHub-Delivery", d.GUID)
	h.Set("X-GitHub-Hook-ID", fmt.Sprint(a.hookID))
	h.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	h.Set("X-GitHub-Hook-Installation-Target-ID", fmt.Sprint(a.id))
	if a.secret != "" {
		h.Set("X-Hub-Signature-256", Sign(secret, d.Payload))
		h.Set("X-Hub-Signature", signSHA1(secret, d.Payload))
	}
	return h, a.badSig
}

type wireInstallRef struct {
	ID     int64  `json:"id"`
	NodeID string `json:"node_id"`
}

// emit queues event for every App installed on r's owner. payload builds
// the body for one installation (it gets the common fields to embed).
func (s *Server) emit(r *repo, kind WebhookKind, event, action string, payload func(hookCommon) any, sender *user) {
	for _, in := range s.sortedInstallations() {
		a := in.app
		if !in.covers(r) || in.suspendedBy != nil || a.webhookURL == "" || (len(a.events) > 0 && !slices.Contains(a.events, event)) {
			continue
		}
		common := hookCommon{Repository: s.wRepo(r), Sender: s.wUser(sender),
			Installation: &wireInstallRef{ID: in.id, NodeID: nodeID("Installation", in.id)}}
		body, err := json.Marshal(payload(common))
		if err != nil {
			s.logger.Error("webhook payload", "event", event, "err", err)
			continue
		}
		d := &Delivery{ID: s.newID(), GUID: newGUID(), Event: event, Action: action, Kind: kind,
			AppID: a.id, InstallationID: in.id, RepositoryID: r.id, URL: a.webhookURL,
			Payload: body, State: DeliveryPending}
		d.Header, d.BadSignature = s.hookHeader(a, d)
		s.enqueue(d)
	}
}

func (s *Server) sortedInstallations() []*installation {
	l := make([]*installation, 0, len(s.insts))
	for _, in := range s.insts {
		l = append(l, in)
	}
	slices.SortFunc(l, func(a, b *installation) int { return int(a.id - b.id) })
	return l
}

// hookCommon are the fields every payload carries.
type hookCommon struct {
	Repository   *wireRepo       `json:"repository"`
	Sender       *wireUser       `json:"sender"`
	Installation *wireInstallRef `json:"installation"`
}

type changesBody struct {
	Body struct {
		From string `json:"from"`
	} `json:"body"`
}

type issueCommentHook struct {
	Action  string       `json:"action"`
	Issue   wireIssue    `json:"issue"`
	Comment wireComment  `json:"comment"`
	Changes *changesBody `json:"changes,omitempty"`
	hookCommon
}

func (s *Server) emitComment(c *comment, action string, sender *user, from *string) {
	kind := HookIssueCommentCreated
	if action == "edited" {
		kind = HookIssueCommentEdited
	}
	s.emit(c.issue.repo, kind, "issue_comment", action, func(h hookCommon) any {
		p := issueCommentHook{Action: action, Issue: s.wIssue(c.issue), Comment: s.wComment(c), hookCommon: h}
		if from != nil {
			p.Changes = &changesBody{}
			p.Changes.Body.From = *from
		}
		return p
	}, sender)
}

type issuesHook struct {
	Action   string     `json:"action"`
	Issue    wireIssue  `json:"issue"`
	Label    *wireLabel `json:"label,omitempty"`
	Assignee *wireUser  `json:"assignee,omitempty"`
	hookCommon
}

func (s *Server) emitIssue(is *issue, action string, sender *user, l *label, assignee *user) {
	kind := map[string]WebhookKind{"opened": HookIssuesOpened, "labeled": HookIssuesLabeled, "assigned": HookIssuesAssigned}[action]
	s.emit(is.repo, kind, "issues", action, func(h hookCommon) any {
		p := issuesHook{Action: action, Issue: s.wIssue(is), Assignee: s.wUser(assignee), hookCommon: h}
		if l != nil {
			wl := s.wLabel(is.repo, l)
			p.Label = &wl
		}
		return p
	}, sender)
}

type syncShas struct{ before, after string }

type pullRequestHook struct {
	Action      string     `json:"action"`
	Number      int        `json:"number"`
	PullRequest wireFullPR `json:"pull_request"`
	Before      string     `json:"before,omitempty"`
	After       string     `json:"after,omitempty"`
	hookCommon
}

func (s *Server) emitPR(r *repo, is *issue, action string, sender *user, sync *syncShas) {
	kind := map[string]WebhookKind{"opened": HookPullRequestOpened, "synchronize": HookPullRequestSynchronize, "closed": HookPullRequestClosed}[action]
	s.emit(r, kind, "pull_request", action, func(h hookCommon) any {
		p := pullRequestHook{Action: action, Number: is.number, PullRequest: s.wFullPR(is), hookCommon: h}
		if sync != nil {
			p.Before, p.After = sync.before, sync.after
		}
		return p
	}, sender)
}

type reviewCommentHook struct {
	Action      string            `json:"action"`
	Comment     wireReviewComment `json:"comment"`
	PullRequest wirePR            `json:"pull_request"`
	hookCommon
}

func (s *Server) emitReviewComment(c *reviewComment, sender *user) {
	s.emit(c.pr.repo, HookPullRequestReviewComment, "pull_request_review_comment", "created", func(h hookCommon) any {
		return reviewCommentHook{Action: "created", Comment: s.wReviewComment(c), PullRequest: s.wPR(c.pr), hookCommon: h}
	}, sender)
}

type wireHeadCommit struct {
	ID        string `json:"id"`
	TreeID    string `json:"tree_id"`
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"`
	Author    struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	} `json:"author"`
	Committer struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	} `json:"committer"`
}

type wireCheckSuite struct {
	ID                   int64           `json:"id"`
	NodeID               string          `json:"node_id"`
	HeadBranch           *string         `json:"head_branch"`
	HeadSHA              string          `json:"head_sha"`
	Status               string          `json:"status"`
	Conclusion           *string         `json:"conclusion"`
	URL                  string          `json:"url"`
	Before               *string         `json:"before"`
	After                *string         `json:"after"`
	PullRequests         []wireMinimalPR `json:"pull_requests"`
	App                  *wireApp        `json:"app"`
	CreatedAt            string          `json:"created_at"`
	UpdatedAt            string          `json:"updated_at"`
	Rerequestable        bool            `json:"rerequestable"`
	RunsRerequestable    bool            `json:"runs_rerequestable"`
	LatestCheckRunsCount int             `json:"latest_check_runs_count"`
	CheckRunsURL         string          `json:"check_runs_url"`
	HeadCommit           wireHeadCommit  `json:"head_commit"`
}

type checkSuiteHook struct {
	Action     string         `json:"action"`
	CheckSuite wireCheckSuite `json:"check_suite"`
	hookCommon
}

func (s *Server) emitCheckSuite(cs *checkSuite, c gitCommit, sender *user) {
	r := cs.repo
	api := fmt.Sprintf("%s/repos/%s/check-suites/%d", s.api, r.fullName(), cs.id)
	s.emit(r, HookCheckSuiteCompleted, "check_suite", "completed", func(h hookCommon) any {
		concl := cs.concl
		w := wireCheckSuite{ID: cs.id, NodeID: nodeID("CheckSuite", cs.id), HeadBranch: strOrNil(cs.branch),
			HeadSHA: cs.headSHA, Status: cs.status, Conclusion: &concl, URL: api,
			After: &cs.headSHA, PullRequests: s.suitePRs(cs), App: s.wApp(cs.app),
			CreatedAt: ts(cs.created), UpdatedAt: ts(cs.updated), Rerequestable: true, RunsRerequestable: true,
			LatestCheckRunsCount: len(cs.runs), CheckRunsURL: api + "/check-runs"}
		if len(c.parents) > 0 {
			w.Before = &c.parents[0]
		}
		hc := &w.HeadCommit
		hc.ID, hc.TreeID, hc.Message, hc.Timestamp = c.sha, c.tree, c.message, c.committerDate
		hc.Author.Name, hc.Author.Email = c.authorName, c.authorEmail
		hc.Committer.Name, hc.Committer.Email = c.committerName, c.committerEmail
		return checkSuiteHook{Action: "completed", CheckSuite: w, hookCommon: h}
	}, sender)
}
