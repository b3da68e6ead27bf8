package slacksim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The Events API over HTTP (httpdeliver.go): with a Request URL set,
// envelopes are POSTed there instead of sent on a socket, signed as
// Slack signs them: X-Slack-Request-Timestamp is the Unix time and
// X-Slack-Signature is "v0=" + hex(HMAC-SHA256(signing secret,
// "v0:" + timestamp + ":" + body)). Events are JSON; interactions a form
// with one field, payload (the JSON); slash commands a form of their
// fields. An answer other than 200 within AckTimeout is a miss; events
// are retried with X-Slack-Retry-Num and X-Slack-Retry-Reason
// (http_timeout, http_error, connection_failed).

// Sign is Slack's v0 signature of a body at a timestamp.
func Sign(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// httpBody is an envelope's payload as Slack POSTs it.
func (e *envelope) httpBody() ([]byte, string) {
	switch e.Kind {
	case KindInteractive:
		return []byte("payload=" + url.QueryEscape(string(e.Payload))), "application/x-www-form-urlencoded"
	case KindSlashCommands:
		var fields map[string]string
		json.Unmarshal(e.Payload, &fields)
		v := url.Values{}
		for k, x := range fields {
			v.Set(k, x)
		}
		return []byte(v.Encode()), "application/x-www-form-urlencoded"
	}
	return e.Payload, "application/json"
}

// signedRequest is a delivery, signed (s.mu held: it reads the tamper
// settings).
func (s *Server) signedRequest(ctx context.Context, target string, body []byte, ctype string, now time.Time) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	ts := now.Add(-s.st.tamper.TimestampSkew).Unix()
	secret := s.opts.SigningSecret
	if s.st.tamper.BadSignature {
		secret = "not-the-" + secret
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Slack-Signature", Sign(secret, ts, body))
	return req, nil
}

// TamperSpec makes HTTP deliveries wrong on purpose, for a receiver's
// tests: signed with another secret, or stamped TimestampSkew in the
// past (a receiver must refuse one older than 5 minutes).
type TamperSpec struct {
	BadSignature  bool          `json:"bad_signature"`
	TimestampSkew time.Duration `json:"timestamp_skew"`
}

// Tamper sets how the next HTTP deliveries are spoiled (the zero value:
// not at all).
func (s *Server) Tamper(spec TamperSpec) {
	s.mu.Lock()
	s.st.tamper = spec
	s.mu.Unlock()
}

// postEnvelope starts an HTTP delivery of e (s.mu held). Its goroutine
// records the answer if the attempt is still the current one; the
// dispatcher ends it at the deadline.
func (s *Server) postEnvelope(e *envelope, now time.Time) {
	body, ctype := e.httpBody()
	ctx, cancel := context.WithCancel(s.ctx)
	target := s.st.requestURL
	switch {
	case e.Kind == KindInteractive && s.st.interURL != "":
		target = s.st.interURL
	case e.Kind == KindSlashCommands && s.st.commandURL != "":
		target = s.st.commandURL
	}
	req, err := s.signedRequest(ctx, target, body, ctype, now)
	e.State = StateSent
	e.deadline = now.Add(s.opts.AckTimeout)
	e.Attempts = append(e.Attempts, Attempt{At: now, Outcome: "pending"})
	attempt := len(e.Attempts)
	if err != nil {
		cancel()
		s.missed(e, "connection_failed", 0, now)
		return
	}
	if attempt > 1 {
		req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(attempt-1))
		req.Header.Set("X-Slack-Retry-Reason", e.retryReason)
	}
	e.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		status, answer, err := s.roundTrip(req)
		s.mu.Lock()
		defer s.mu.Unlock()
		if e.State != StateSent || len(e.Attempts) != attempt {
			return // missed at the deadline, or Close
		}
		now := s.clock.Now()
		switch {
		case err != nil:
			s.missed(e, "connection_failed", 0, now)
		case status != http.StatusOK:
			s.missed(e, "http_error", status, now)
		default:
			e.Attempts[attempt-1].Status = status
			s.acked(e, answerPayload(answer), now)
		}
		s.wake()
	}()
}

func (s *Server) roundTrip(req *http.Request) (int, []byte, error) {
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// answerPayload is an HTTP answer's body as an ack payload: JSON as it
// is, text as {"text": ...}.
func answerPayload(b []byte) json.RawMessage {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) && b[0] == '{' {
		return b
	}
	out, _ := json.Marshal(map[string]string{"text": string(b)})
	return out
}

// SetRequestURL points deliveries at an HTTP endpoint (Socket Mode off),
// or back to Socket Mode with "". Envelopes not yet acked go the new way.
// Clicks and commands go there too, unless SetRequestURLs said otherwise.
func (s *Server) SetRequestURL(u string) error {
	return s.SetRequestURLs(u, "", "")
}

// SetRequestURLs sets the events' Request URL, and the Interactivity
// Request URL and slash commands' URL ("": the events' one).
func (s *Server) SetRequestURLs(events, interactivity, commands string) error {
	for _, u := range []string{events, interactivity, commands} {
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("request URL %q: give an http or https URL", u)
		}
	}
	if events == "" && (interactivity != "" || commands != "") {
		return fmt.Errorf("an interactivity or command URL needs an events Request URL (Socket Mode carries all three)")
	}
	s.mu.Lock()
	s.st.requestURL, s.st.interURL, s.st.commandURL = events, interactivity, commands
	s.mu.Unlock()
	s.wake()
	return nil
}

// VerifyURL sends the url_verification challenge Slack sends when a
// Request URL is saved, and reports whether the app answered it: 200
// with the challenge (as text, as {"challenge": ...} or as a form).
func (s *Server) VerifyURL(ctx context.Context) error {
	challenge := randHex(24)
	body, _ := json.Marshal(map[string]string{"token": verificationToken, "challenge": challenge, "type": "url_verification"})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s.mu.Lock()
	target := s.st.requestURL
	if target == "" {
		s.mu.Unlock()
		return errors.New("no request URL: Socket Mode is on")
	}
	req, err := s.signedRequest(ctx, target, body, "application/json", s.clock.Now())
	s.mu.Unlock()
	if err != nil {
		return err
	}
	status, answer, err := s.roundTrip(req)
	if err != nil {
		return fmt.Errorf("url_verification: %w", err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("url_verification: answered %d: %s", status, answer)
	}
	got := strings.TrimSpace(string(answer))
	var obj struct {
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(answer, &obj) == nil && obj.Challenge != "" {
		got = obj.Challenge
	} else if v, err := url.ParseQuery(got); err == nil && v.Get("challenge") != "" {
		got = v.Get("challenge")
	}
	if got != challenge {
		return fmt.Errorf("url_verification: answered %q, not the challenge", answer)
	}
	return nil
}
