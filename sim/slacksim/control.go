package slacksim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The control API over HTTP (control.go): the Go methods as JSON, under
// /_sim/slack/, for a test in another process. Bodies take the Go
// specs' fields; durations are in seconds ("grace", "seconds",
// "per_seconds"). Unknown things are 404 and bad input 400, each with
// {"error": "..."}.

type controlRoute struct {
	method string
	h      func(s *Server, r *http.Request, body []byte) (any, error)
}

var controlRoutes = map[string]controlRoute{
	"tokens":   {"GET", func(s *Server, _ *http.Request, _ []byte) (any, error) { return s.Tokens(), nil }},
	"users":    {"POST", decodeDo(func(s *Server, x UserSpec) (any, error) { return s.AddUser(x) })},
	"channels": {"POST", decodeDo(func(s *Server, x ChannelSpec) (any, error) { return s.AddChannel(x) })},
	"ims":      {"POST", decodeDo(func(s *Server, x struct{ User string }) (any, error) { return s.OpenIM(x.User) })},
	"messages": {"POST", decodeDo(func(s *Server, x PostSpec) (any, error) { return s.Post(x) })},
	"edits":    {"POST", decodeDo(func(s *Server, x EditSpec) (any, error) { return nil, s.Edit(x) })},
	"deletes":  {"POST", decodeDo(func(s *Server, x struct{ Channel, TS string }) (any, error) { return nil, s.Delete(x.Channel, x.TS) })},
	"clicks":   {"POST", decodeDo(func(s *Server, x ClickSpec) (any, error) { return nil, s.Click(x) })},
	"commands": {"POST", decodeDo(func(s *Server, x CommandSpec) (any, error) { return nil, s.Command(x) })},
	"join": {"POST", decodeDo(func(s *Server, x struct {
		Channel string
		Users   []string
	}) (any, error) {
		return nil, s.JoinChannel(x.Channel, x.Users...)
	})},
	"connections": {"GET", func(s *Server, _ *http.Request, _ []byte) (any, error) { return s.Connections(), nil }},
	"disconnect": {"POST", decodeDo(func(s *Server, x struct {
		Reason string  `json:"reason"`
		Grace  float64 `json:"grace"`
		Conn   int     `json:"conn"`
	}) (any, error) {
		n, err := s.Disconnect(DisconnectSpec{Reason: x.Reason, Grace: seconds(x.Grace), Conn: x.Conn})
		return map[string]int{"connections": n}, err
	})},
	"drop": {"POST", decodeDo(func(s *Server, x struct{ Conn int }) (any, error) {
		return map[string]int{"connections": s.Drop(x.Conn)}, nil
	})},
	"lose-acks": {"POST", decodeDo(func(s *Server, x LoseSpec) (any, error) {
		s.LoseAcks(x)
		return map[string]int{"n": x.N}, nil
	})},
	"storm": {"POST", decodeDo(func(s *Server, x struct {
		Seconds float64  `json:"seconds"`
		Methods []string `json:"methods"`
	}) (any, error) {
		until, err := s.Storm(StormSpec{For: seconds(x.Seconds), Methods: x.Methods})
		return map[string]any{"until": until}, err
	})},
	"limits": {"POST", decodeDo(func(s *Server, x struct {
		Method string `json:"method"`
		Limits []struct {
			Count      int     `json:"count"`
			PerSeconds float64 `json:"per_seconds"`
			PerChannel bool    `json:"per_channel"`
		} `json:"limits"`
	}) (any, error) {
		var ls []Limit
		for _, l := range x.Limits {
			ls = append(ls, Limit{Count: l.Count, Per: seconds(l.PerSeconds), PerChannel: l.PerChannel})
		}
		return nil, s.SetLimit(x.Method, ls...)
	})},
	"request-url": {"POST", decodeDo(func(s *Server, x struct {
		URL              string `json:"url"`
		InteractivityURL string `json:"interactivity_url"`
		CommandURL       string `json:"command_url"`
	}) (any, error) {
		return nil, s.SetRequestURLs(x.URL, x.InteractivityURL, x.CommandURL)
	})},
	"tamper": {"POST", decodeDo(func(s *Server, x struct {
		BadSignature  bool    `json:"bad_signature"`
		TimestampSkew float64 `json:"timestamp_skew"`
	}) (any, error) {
		s.Tamper(TamperSpec{BadSignature: x.BadSignature, TimestampSkew: seconds(x.TimestampSkew)})
		return nil, nil
	})},
	"verify-url": {"POST", func(s *Server, r *http.Request, _ []byte) (any, error) { return nil, s.VerifyURL(r.Context()) }},
	"calls":      {"GET", func(s *Server, _ *http.Request, _ []byte) (any, error) { return s.Calls(), nil }},
	"ephemerals": {"GET", func(s *Server, _ *http.Request, _ []byte) (any, error) { return s.Ephemerals(), nil }},
	"views":      {"GET", func(s *Server, _ *http.Request, _ []byte) (any, error) { return s.Views(), nil }},
	"envelopes": {"GET", func(s *Server, r *http.Request, _ []byte) (any, error) {
		if r.URL.Query().Get("wait") == "" {
			return s.Envelopes(), nil
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		return s.WaitEnvelopes(ctx)
	}},
	"messages/list": {"GET", func(s *Server, r *http.Request, _ []byte) (any, error) {
		q := r.URL.Query()
		if q.Get("channel") == "" {
			return nil, fmt.Errorf("give ?channel=ID (and &thread=TS for a thread)")
		}
		if t := q.Get("thread"); t != "" {
			return s.Thread(q.Get("channel"), t), nil
		}
		return s.Messages(q.Get("channel")), nil
	}},
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func decodeDo[T any](f func(*Server, T) (any, error)) func(*Server, *http.Request, []byte) (any, error) {
	return func(s *Server, _ *http.Request, body []byte) (any, error) {
		var x T
		d := json.NewDecoder(strings.NewReader(string(body)))
		d.DisallowUnknownFields()
		if err := d.Decode(&x); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		return f(s, x)
	}
}

func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	name := strings.Trim(strings.TrimPrefix(r.URL.Path, "/_sim/slack/"), "/")
	if name == "messages" && r.Method == http.MethodGet {
		name = "messages/list"
	}
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	rt, ok := controlRoutes[name]
	if !ok {
		reply(http.StatusNotFound, map[string]string{"error": "no control " + name + " (see sim/slacksim/README.md)"})
		return
	}
	if r.Method != rt.method {
		reply(http.StatusMethodNotAllowed, map[string]string{"error": name + " takes " + rt.method})
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	out, err := rt.h(s, r, body)
	if err != nil {
		reply(http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if out == nil {
		out = map[string]bool{"ok": true}
	}
	reply(http.StatusOK, out)
}
