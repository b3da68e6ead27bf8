package opencode

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// stateVersion is bumped on any incompatible change of savedState.
const stateVersion = 1

// savedState is what State returns (as JSON).
type savedState struct {
	Version int    `json:"v"`
	Session string `json:"session"` // OpenCode's session id
	Workdir string `json:"workdir"` // the directory the session belongs to
	// OpenCode is the version that wrote the conversation.
	OpenCode string `json:"opencode,omitempty"`
	// Export is the conversation, gzipped: {"info": Session, "messages":
	// [{"info": Message, "parts": [Part...]}...]}, exactly what `opencode
	// export` writes and `opencode import` reads.
	Export []byte `json:"export"`
}

func unpack(state []byte) (savedState, error) {
	var st savedState
	if err := json.Unmarshal(state, &st); err != nil {
		return st, fmt.Errorf("opencode agent: the saved state is not this agent's: %w", err)
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("opencode agent: the saved state has version %d; this Harvest reads %d", st.Version, stateVersion)
	}
	if st.Session == "" || len(st.Export) == 0 {
		return st, errors.New("opencode agent: the saved state has no conversation")
	}
	return st, nil
}

// save reads the session's conversation out of the box (two API calls:
// the session and its messages) for State. It runs at the end of every
// turn whose server is still running. When it fails (the conversation is
// over MaxStateBytes, the API failed), State says so until a later save
// succeeds; the caller keeps the state it saved before.
func (a *Agent) save(ctx context.Context, s *server) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
	defer cancel()
	a.mu.Lock()
	session, version := a.session, a.version
	a.mu.Unlock()
	state, err := a.export(ctx, s, session, version)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.saveErr = err
		a.log.Error("reading the conversation out of the box", "err", err)
		return
	}
	a.saved, a.saveErr = state, nil
}

func (a *Agent) export(ctx context.Context, s *server, session, version string) ([]byte, error) {
	if s == nil || !s.alive() {
		return nil, errors.New("the OpenCode server is not running")
	}
	var info, msgs json.RawMessage
	if err := a.call(ctx, s, http.MethodGet, "/session/"+session, nil, http.StatusOK, &info); err != nil {
		return nil, err
	}
	if err := a.call(ctx, s, http.MethodGet, "/session/"+session+"/message", nil, http.StatusOK, &msgs); err != nil {
		return nil, err
	}
	n := int64(len(info) + len(msgs) + 32)
	if n > a.cfg.MaxStateBytes {
		return nil, fmt.Errorf("the conversation is %d bytes, over the %d bytes State keeps (Config.MaxStateBytes)", n, a.cfg.MaxStateBytes)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	fmt.Fprintf(zw, `{"info":%s,"messages":%s}`, info, msgs)
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return json.Marshal(savedState{Version: stateVersion, Session: session, Workdir: a.cfg.Workdir, OpenCode: version, Export: buf.Bytes()})
}

// importSession writes a saved conversation into the box's OpenCode
// database with `opencode import` (the server is not running yet).
func (a *Agent) importSession(ctx context.Context, st savedState) error {
	zr, err := gzip.NewReader(bytes.NewReader(st.Export))
	if err != nil {
		return fmt.Errorf("opencode agent: the saved conversation is corrupt: %w", err)
	}
	doc, err := io.ReadAll(io.LimitReader(zr, a.cfg.MaxStateBytes+1))
	if err != nil {
		return fmt.Errorf("opencode agent: the saved conversation is corrupt: %w", err)
	}
	if int64(len(doc)) > a.cfg.MaxStateBytes {
		return fmt.Errorf("opencode agent: the saved conversation is over %d bytes (Config.MaxStateBytes)", a.cfg.MaxStateBytes)
	}
	file := path.Join(a.dir, "import-"+st.Session+".json")
	if err := a.box.WriteFile(ctx, file, doc, 0o600); err != nil {
		return fmt.Errorf("opencode agent: writing the saved conversation into the box: %w", err)
	}
	defer a.box.Remove(context.WithoutCancel(ctx), file)
	out := newOutputTail() // safe for stdout and stderr at once
	rctx, cancel := context.WithTimeout(ctx, a.cfg.StartTimeout)
	defer cancel()
	res, err := a.box.Run(rctx, &sandbox.Cmd{
		Args: []string{a.cfg.CLI, "import", file}, Env: a.env(), Dir: a.cfg.Workdir,
		Stdout: out, Stderr: out, Timeout: a.cfg.StartTimeout + 5*time.Second,
	})
	if err != nil {
		return fmt.Errorf("opencode agent: importing the saved conversation: %w", err)
	}
	if tail := out.tail(); !res.Success() || !strings.Contains(tail, st.Session) {
		return fmt.Errorf("opencode agent: `opencode import` of session %s failed (%v): %s", st.Session, res, tail)
	}
	return nil
}
