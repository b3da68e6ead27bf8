package gitproxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// upstreamUser is the Basic user name GitHub takes with an installation
// token as the password.
const upstreamUser = "x-access-token"

// The smart-HTTP endpoints (gitprotocol-http.txt), after the repository.
const (
	pathInfoRefs    = "/info/refs"
	pathUploadPack  = "/git-upload-pack"
	pathReceivePack = "/git-receive-pack"

	serviceUploadPack  = "git-upload-pack"
	serviceReceivePack = "git-receive-pack"
)

// exchange is one request on its way through the proxy, for its log line.
type exchange struct {
	session, repo string
	op            Op
	endpoint      string
	status        int
	problem       string // why it failed or was refused, for the log
	// cut: the upstream's answer broke off after the box got its start;
	// the box's connection is then cut too, so its git sees an error
	// rather than a short answer.
	cut bool
}

// ServeHTTP serves one smart-HTTP request: it checks the box's token and
// the repository, applies the push policy to a push, and forwards what it
// allows with the upstream credential added. See the package doc.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ex := &exchange{}
	defer func() { p.logRequest(r, ex, start) }()

	repoPath, endpoint, ok := splitPath(r.URL.Path)
	ex.repo, ex.endpoint = repoPath, endpoint
	if !ok {
		p.plain(w, ex, http.StatusNotFound, "harvest: %s is not a git smart-HTTP path; use https://github.com/owner/name.git as the remote", r.URL.Path)
		return
	}
	op, method := OpFetch, http.MethodPost
	switch endpoint {
	case pathInfoRefs:
		method = http.MethodGet
		switch r.URL.Query().Get("service") {
		case serviceUploadPack:
		case serviceReceivePack:
			op = OpPush
		default:
			p.plain(w, ex, http.StatusForbidden, "harvest: only git's smart HTTP protocol is served (info/refs?service=git-upload-pack or git-receive-pack); use a git of version 1.6.6 or later")
			return
		}
	case pathReceivePack:
		op = OpPush
	}
	ex.op = op
	if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", method)
		p.plain(w, ex, http.StatusMethodNotAllowed, "harvest: %s %s: use %s", r.Method, r.URL.Path, method)
		return
	}

	ln, _ := r.Context().Value(listenerKey{}).(net.Listener)
	_, pass, hasAuth := r.BasicAuth()
	g := p.lookup(pass, ln)
	if g == nil {
		ex.problem = "no credentials"
		if hasAuth {
			ex.problem = "credentials not valid"
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="Harvest git"`)
		p.plain(w, ex, http.StatusUnauthorized, "harvest: the git credentials are not valid: they are not ones Harvest gave this box, or its session has ended")
		return
	}
	ex.session = g.session
	rp := g.find(repoPath)
	if rp == nil {
		reason := fmt.Sprintf("harvest: this session has no access to %s; it may use %s", repoPath, g.repoList())
		p.refuse(g, Refusal{Session: g.session, Repo: repoPath, Op: op, Kind: RefusedRepo, Reason: reason})
		p.plain(w, ex, http.StatusNotFound, "%s", reason)
		return
	}
	ex.repo = rp.Path
	if op == OpPush && endpoint == pathInfoRefs && rp.ReadOnly {
		reason := fmt.Sprintf("harvest: %s is read-only for this session; it may fetch from it but not push", rp.Path)
		p.refuse(g, Refusal{Session: g.session, Repo: rp.Path, Op: op, Kind: RefusedReadOnly, Reason: reason})
		p.plain(w, ex, http.StatusForbidden, "%s", reason)
		return
	}

	// The upstream request ends with the box's, with Serve's context, when
	// the token is revoked, and after the request timeout.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(g.revoked, func() { cancel(errRevoked) })
	defer stop()
	ctx, cancelTimeout := context.WithTimeout(ctx, p.timeout)
	defer cancelTimeout()

	switch endpoint {
	case pathInfoRefs:
		p.forward(ctx, w, r, ex, rp, upstreamCall{method: http.MethodGet, path: pathInfoRefs, query: "service=" + r.URL.Query().Get("service")})
	case pathUploadPack:
		http.NewResponseController(w).EnableFullDuplex()
		body := http.MaxBytesReader(w, r.Body, p.maxBody)
		p.forward(ctx, w, r, ex, rp, upstreamCall{method: http.MethodPost, path: pathUploadPack, body: body,
			length: r.ContentLength, encoding: r.Header.Get("Content-Encoding")})
	case pathReceivePack:
		http.NewResponseController(w).EnableFullDuplex()
		p.push(ctx, w, r, ex, g, rp)
	}
	if ex.cut {
		panic(http.ErrAbortHandler) // the server closes the connection; logRequest runs
	}
}

// splitPath cuts /owner/name.git/info/refs into the repository
// ("owner/name") and the endpoint ("/info/refs").
func splitPath(path string) (repo, endpoint string, ok bool) {
	for _, e := range []string{pathInfoRefs, pathUploadPack, pathReceivePack} {
		if rest, found := strings.CutSuffix(path, e); found {
			repo = strings.TrimSuffix(strings.Trim(rest, "/"), ".git")
			return repo, e, repo != "" && !strings.Contains(repo, "..")
		}
	}
	return "", "", false
}

func (g *grant) repoList() string {
	if len(g.repos) == 0 {
		return "no repository"
	}
	var names []string
	for _, r := range g.repos {
		names = append(names, r.Path)
	}
	return strings.Join(names, ", ")
}

// push reads the command list of a receive-pack request, applies the
// policy, and either answers the refusal itself (forwarding nothing) or
// forwards the whole request and reports what landed.
func (p *Proxy) push(ctx context.Context, w http.ResponseWriter, r *http.Request, ex *exchange, g *grant, rp *repo) {
	var body io.Reader = http.MaxBytesReader(w, r.Body, p.maxBody)
	encoding := strings.ToLower(r.Header.Get("Content-Encoding"))
	switch encoding {
	case "":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			p.plain(w, ex, http.StatusBadRequest, "harvest: the push's gzip body cannot be read: %v", err)
			return
		}
		defer zr.Close()
		body = &limitReader{r: zr, n: p.maxBody}
	default:
		p.plain(w, ex, http.StatusUnsupportedMediaType, "harvest: Content-Encoding %q is not supported; send the push plain or gzip'd", encoding)
		return
	}
	br := bufio.NewReaderSize(body, 64<<10)
	q, err := readPushRequest(br, maxCommandBytes)
	if err != nil {
		status, reason := http.StatusBadRequest, "harvest: the push could not be read: "+err.Error()
		if u, ok := errors.AsType[errUnsupported](err); ok {
			reason = "harvest: " + u.msg
		} else if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status = http.StatusRequestEntityTooLarge
		}
		p.refuse(g, Refusal{Session: g.session, Repo: rp.Path, Op: OpPush, Kind: RefusedRequest, Reason: reason})
		p.plain(w, ex, status, "%s", reason)
		return
	}

	refs, refused := check(ctx, rp, q.commands)
	if refused {
		// Read the rest, so the box's git gets the answer rather than a
		// broken pipe; nothing of it goes anywhere.
		if _, err := io.Copy(io.Discard, br); err != nil {
			ex.problem = "draining a refused push: " + err.Error()
		}
		ref := Refusal{Session: g.session, Repo: rp.Path, Op: OpPush, Refs: refs}
		var messages []string
		for _, u := range refs {
			if u.Refused != RefusedWithOthers {
				if ref.Kind == "" {
					ref.Kind, ref.Reason = u.Refused, u.Reason
				}
				messages = append(messages, u.Reason)
			}
		}
		if ex.problem == "" {
			ex.problem = "push refused: " + string(ref.Kind)
		}
		ex.status = http.StatusOK
		h := w.Header()
		h.Set("Content-Type", "application/x-git-receive-pack-result")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		w.Write(refusalResult(q, refs, messages))
		p.refuse(g, ref)
		return
	}

	length := int64(-1)
	if encoding == "" && r.ContentLength >= 0 {
		length = r.ContentLength // the bytes go on unchanged
	}
	rr := newReportReader(q.has("side-band-64k"))
	fwdErr := p.forward(ctx, w, r, ex, rp, upstreamCall{method: http.MethodPost, path: pathReceivePack,
		body: io.MultiReader(bytes.NewReader(q.raw), br), length: length, tap: rr})
	if len(q.commands) == 0 {
		return // git's probe of the credentials, before a large push
	}
	push := Push{Session: g.session, Repo: rp.Path, Refs: refs, Reported: rr.done, Unpack: rr.unpack}
	why := ""
	switch {
	case rr.fatal != "":
		why = "harvest: the upstream failed: " + oneLine(strings.TrimSpace(rr.fatal))
	case fwdErr != nil:
		why = "harvest: the push's outcome is unknown: " + fwdErr.Error()
	case !rr.done:
		why = fmt.Sprintf("harvest: the upstream answered %d without a report of the push", ex.status)
	case rr.unpack != "ok":
		why = "harvest: the upstream could not unpack the push: " + rr.unpack
	}
	for i := range push.Refs {
		u := &push.Refs[i]
		res, found := rr.results[u.Ref]
		switch {
		case why != "":
			u.Reason = why
		case !found:
			u.Reason = "harvest: the upstream did not report this ref"
		default:
			u.OK, u.Reason = res.ok, res.reason
		}
	}
	if g.onPush != nil {
		g.onPush(push)
	}
}

// limitReader fails once more than n bytes were read (a gzip'd body
// decompressing past the limit).
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(b []byte) (int, error) {
	if l.n < 0 {
		return 0, &http.MaxBytesError{}
	}
	if int64(len(b)) > l.n+1 {
		b = b[:l.n+1]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	if l.n < 0 {
		return n, &http.MaxBytesError{}
	}
	return n, err
}

// upstreamCall is what forward sends.
type upstreamCall struct {
	method, path, query string
	body                io.Reader // nil for a GET
	length              int64     // -1: unknown (chunked)
	encoding            string    // the body's Content-Encoding, passed on
	tap                 io.Writer // sees the (scrubbed) response body
}

// forward sends c to rp's upstream with the upstream credential and
// streams the answer to w, scrubbed. It returns an error when the answer
// could not be had or was cut short (the box then sees an error status or
// a cut connection).
func (p *Proxy) forward(ctx context.Context, w http.ResponseWriter, in *http.Request, ex *exchange, rp *repo, c upstreamCall) error {
	if rp.base == nil {
		ex.problem = rp.badURL.Error()
		p.plain(w, ex, http.StatusBadGateway, "harvest: the upstream of %s is misconfigured in Harvest; tell its operator", rp.Path)
		return rp.badURL
	}
	token := ""
	if rp.Token != nil {
		var err error
		if token, err = rp.Token(ctx); err != nil {
			ex.problem = "getting the upstream credential: " + err.Error()
			p.plain(w, ex, http.StatusBadGateway, "harvest: could not get a credential for %s's upstream; try again", rp.Path)
			return err
		}
	}
	sc := newScrubber(token)
	u := *rp.base
	u.Path += c.path
	u.RawQuery = c.query
	req, err := http.NewRequestWithContext(ctx, c.method, u.String(), c.body)
	if err != nil {
		ex.problem = err.Error()
		p.plain(w, ex, http.StatusBadGateway, "harvest: cannot make the upstream request for %s", rp.Path)
		return err
	}
	if c.body != nil {
		req.ContentLength = c.length
		if c.length == 0 {
			req.Body = http.NoBody
		}
	}
	for _, name := range []string{"Content-Type", "Accept", "Git-Protocol", "User-Agent"} {
		if v := in.Header.Get(name); v != "" {
			req.Header.Set(name, v)
		}
	}
	if c.encoding != "" {
		req.Header.Set("Content-Encoding", c.encoding)
	}
	if token != "" {
		req.SetBasicAuth(upstreamUser, token)
	}
	res, err := p.transport.RoundTrip(req)
	if err != nil {
		err = errors.New(sc.scrubString(err.Error()))
		if cause := context.Cause(ctx); cause != nil {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
		ex.problem = "upstream: " + err.Error()
		p.plain(w, ex, http.StatusBadGateway, "harvest: could not reach %s's upstream; try again", rp.Path)
		return err
	}
	defer res.Body.Close()

	if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusProxyAuthRequired {
		// Not the box's credentials but Harvest's: a 401 would make the
		// box's git ask for a password.
		ex.problem = fmt.Sprintf("the upstream refused Harvest's credential (%d)", res.StatusCode)
		p.plain(w, ex, http.StatusBadGateway, "harvest: %s's upstream refused Harvest's credential; tell Harvest's operator (the GitHub App's access to the repository)", rp.Path)
		return errors.New(ex.problem)
	}
	sc.copyHeaders(w.Header(), res.Header)
	ex.status = res.StatusCode
	w.WriteHeader(res.StatusCode)

	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	clientGone := false
	emit := func(b []byte) {
		if len(b) == 0 {
			return
		}
		if c.tap != nil {
			c.tap.Write(b)
		}
		if clientGone {
			return
		}
		if _, err := w.Write(b); err != nil {
			clientGone = true
			return
		}
		rc.Flush()
	}
	for {
		n, err := res.Body.Read(buf)
		emit(sc.write(buf[:n]))
		if err == io.EOF {
			emit(sc.flush())
			return nil
		}
		if err != nil {
			err = errors.New(sc.scrubString(err.Error()))
			ex.problem = "reading the upstream's answer: " + err.Error()
			ex.cut = true
			return err
		}
		if clientGone && c.tap == nil {
			// (A push's answer is read to its end: OnPush reports it.)
			ex.problem = "the box went away"
			return errors.New(ex.problem)
		}
	}
}

// plain answers with a text/plain message, which git prints as "remote: "
// lines beside its own error.
func (p *Proxy) plain(w http.ResponseWriter, ex *exchange, status int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	ex.status = status
	if ex.problem == "" {
		ex.problem = msg
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

func (p *Proxy) refuse(g *grant, r Refusal) {
	if g.onRefuse != nil {
		g.onRefuse(r)
	}
}

func (p *Proxy) logRequest(r *http.Request, ex *exchange, start time.Time) {
	attrs := []any{"method", r.Method, "repo", ex.repo, "endpoint", ex.endpoint, "status", ex.status,
		"duration", time.Since(start).Round(time.Millisecond)}
	if ex.session != "" {
		attrs = append(attrs, "session", ex.session)
	}
	if ex.op != "" {
		attrs = append(attrs, "op", ex.op)
	}
	switch {
	case ex.problem == "no credentials":
		// git's first request of a push or an authenticated fetch: it
		// sends its credentials only once asked (the 401).
		p.logger.Debug("git proxy", append(attrs, "problem", ex.problem)...)
	case ex.problem != "":
		p.logger.Warn("git proxy", append(attrs, "problem", ex.problem)...)
	default:
		p.logger.Info("git proxy", attrs...)
	}
}
