package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/session"
)

// GET /v1/sessions/{id}/shell is a WebSocket to a shell on a PTY in the
// session's live box (session.Manager.OpenShell), for whoever may act on
// it (its user, an admin, or one with write access to all its
// repositories: access.go). Binary messages carry the terminal's bytes both ways; a text
// message from the client is a control message, {"type":"resize","rows":R,
// "cols":C}. When the shell exits the server closes the socket with status
// 1000 and "exited N"; a session without a box is a 409 before the upgrade.
//
// A browser cannot set headers on a WebSocket upgrade, so the page
// authenticates with the sign-in cookie, and a cookie is ambient: any site
// could open this socket with it (SameSite=Strict does not stop another
// port of the same host). So a cookie-authenticated upgrade must carry an
// Origin, and it must be this server's: the same rule as the CSRF check of
// websession.go, minus the token a WebSocket cannot send.

// ShellControl is a text message from the client.
type ShellControl struct {
	Type string `json:"type"` // "resize"
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// maxShellMessage bounds a message from the client (a paste).
const maxShellMessage = 1 << 20

func (s *Server) shell(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	if c.web != "" {
		if r.Header.Get("Origin") == "" {
			return errorf(http.StatusForbidden, CodeForbidden, "a shell opened with the sign-in cookie needs the Origin header of this server's page: open it from the Harvest page, or send Authorization: Bearer TOKEN")
		}
		if e := sameOrigin(r); e != nil {
			return e
		}
	}
	if _, e := s.sessionFor(r, c, r.PathValue("id"), authz.Write); e != nil {
		return e
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return errorf(http.StatusBadRequest, CodeBadRequest, "GET "+r.URL.Path+" is a WebSocket: connect with a WebSocket client (Connection: Upgrade, Upgrade: websocket)")
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stopOnDrain := context.AfterFunc(s.drain, cancel)
	defer stopOnDrain()

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	defer inW.Close()
	sh, err := s.cfg.Manager.OpenShell(ctx, "", r.PathValue("id"), session.ShellIO{
		Stdin: inR, Stdout: outW, By: c.token.ID, ByName: c.token.Name,
	})
	if err != nil {
		return fromManager(err)
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The origin was checked above, for the requests that need it; a
		// bearer client (no cookie) may come from anywhere.
		InsecureSkipVerify: true,
	})
	if err != nil {
		// Accept has answered the client.
		if a := auditOf(r); a != nil {
			a.result = "not_upgraded"
		}
		go io.Copy(io.Discard, outR)
		sh.Close("not upgraded: " + err.Error())
		outW.Close()
		return nil
	}
	conn.SetReadLimit(maxShellMessage)
	s.recordNow(auditOf(r)) // the shell is open: recorded now, not when it ends

	outDone, inDone := make(chan struct{}), make(chan struct{})
	go func() { // the terminal's output to the client
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				if werr := conn.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					cancel()
					io.Copy(io.Discard, outR) // the shell must not block on its output
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // the client's keys and resizes to the shell
		defer close(inDone)
		defer cancel()
		for {
			typ, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if _, err := inW.Write(b); err != nil {
					return
				}
				continue
			}
			var m ShellControl
			if err := json.Unmarshal(b, &m); err != nil || m.Type != "resize" {
				conn.Close(websocket.StatusUnsupportedData, clip(fmt.Sprintf(`a text message must be {"type":"resize","rows":R,"cols":C}; got %q`, b), 100))
				return
			}
			if err := sh.Resize(ctx, sandbox.TTYSize{Rows: m.Rows, Cols: m.Cols}); err != nil {
				conn.Close(websocket.StatusPolicyViolation, clip("resize: "+err.Error(), 100))
				return
			}
		}
	}()

	reason := "disconnected"
	select {
	case <-sh.Done():
	case <-ctx.Done():
		if s.drain.Err() != nil {
			reason = "server shutting down"
		}
	}
	inW.Close()
	end := sh.Close(reason)
	outW.Close()
	<-outDone // what the shell printed last goes out before the close
	if err := conn.Close(websocket.StatusNormalClosure, clip(fmt.Sprintf("%s (code %d)", end.Reason, end.Code), 100)); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Debug("closing a shell's socket", "err", err)
	}
	cancel()
	<-inDone
	return nil
}
