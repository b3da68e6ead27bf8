package slacksim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Interactions (interact.go): a person clicking a button of a message
// (block_actions) or running a slash command. Each hands the app a
// trigger_id (views.open takes it once, within 3 s) and a response_url
// (up to 5 answers within 30 minutes).

// ClickSpec is a person clicking the button ActionID of the message TS,
// or choosing the option Value of its static_select ActionID (a picker).
type ClickSpec struct {
	User     string `json:"user"`
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	ActionID string `json:"action_id"`
	Value    string `json:"value"` // a static_select's option
}

// selectOption finds a static_select's option by value, in its options
// or its option_groups.
func selectOption(el map[string]any, value string) map[string]any {
	opts, _ := el["options"].([]any)
	if groups, ok := el["option_groups"].([]any); ok {
		for _, g := range groups {
			gm, _ := g.(map[string]any)
			more, _ := gm["options"].([]any)
			opts = append(opts, more...)
		}
	}
	for _, o := range opts {
		om, _ := o.(map[string]any)
		if om != nil && om["value"] == value {
			return om
		}
	}
	return nil
}

// button finds an element by action_id in a message's blocks: in an
// actions block, or a section's accessory.
func button(blocks json.RawMessage, actionID string) (blockID string, el map[string]any) {
	var bs []map[string]any
	json.Unmarshal(blocks, &bs)
	for _, b := range bs {
		var els []any
		if e, ok := b["elements"].([]any); ok && b["type"] == "actions" {
			els = e
		}
		if a, ok := b["accessory"].(map[string]any); ok {
			els = append(els, a)
		}
		for _, e := range els {
			m, _ := e.(map[string]any)
			if m != nil && m["action_id"] == actionID {
				id, _ := b["block_id"].(string)
				return id, m
			}
		}
	}
	return "", nil
}

func (s *Server) interactionHandles(user, channel, threadTS, messageTS string, now time.Time) (triggerID, responseURL string) {
	s.st.seq++
	triggerID = fmt.Sprintf("%d.%d.%s", s.st.seq, 1000000001, randHex(16))
	s.st.triggers[triggerID] = &trigger{user: user, channel: channel, expires: now.Add(3 * time.Second)}
	id := randHex(16)
	s.st.responses[id] = &responseTarget{channel: channel, user: user, threadTS: threadTS, messageTS: messageTS, expires: now.Add(30 * time.Minute)}
	return triggerID, s.url + "/response/" + id
}

// Click delivers the block_actions interaction of a button click.
func (s *Server) Click(spec ClickSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	u := s.st.users[spec.User]
	if u == nil || u.IsBot {
		return fmt.Errorf("no person %q", spec.User)
	}
	ch := s.st.chans[spec.Channel]
	if ch == nil {
		return fmt.Errorf("no channel %q", spec.Channel)
	}
	m := s.st.msg(ch.ID, spec.TS)
	if m == nil || m.Deleted {
		return fmt.Errorf("no message %s in %s", spec.TS, ch.ID)
	}
	blockID, el := button(m.Blocks, spec.ActionID)
	if el == nil {
		return fmt.Errorf("message %s has no element with action_id %q", spec.TS, spec.ActionID)
	}
	actionTS := fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000)
	var action map[string]any
	switch el["type"] {
	case "button":
		if spec.Value != "" {
			return fmt.Errorf("element %q is a button: it has no options to choose (no value)", spec.ActionID)
		}
		action = map[string]any{"action_id": spec.ActionID, "block_id": blockID, "text": el["text"], "type": "button", "action_ts": actionTS}
		for _, k := range []string{"value", "style"} {
			if v, ok := el[k]; ok {
				action[k] = v
			}
		}
	case "static_select":
		opt := selectOption(el, spec.Value)
		if opt == nil {
			return fmt.Errorf("select %q has no option with value %q", spec.ActionID, spec.Value)
		}
		action = map[string]any{"action_id": spec.ActionID, "block_id": blockID, "type": "static_select",
			"selected_option": opt, "action_ts": actionTS}
		if p, ok := el["placeholder"]; ok {
			action["placeholder"] = p
		}
	default:
		return fmt.Errorf("element %q is a %v: only buttons and static selects can be used here", spec.ActionID, el["type"])
	}
	trig, resp := s.interactionHandles(u.ID, ch.ID, m.ThreadTS, m.TS, now)
	container := map[string]any{"type": "message", "message_ts": m.TS, "channel_id": ch.ID, "is_ephemeral": false}
	if m.ThreadTS != "" {
		container["thread_ts"] = m.ThreadTS
	}
	chName := ch.Name
	if ch.IM {
		chName = "directmessage"
	}
	payload := map[string]any{
		"type": "block_actions", "user": map[string]any{"id": u.ID, "username": u.Name, "name": u.Name, "team_id": teamID},
		"api_app_id": appID, "token": verificationToken, "container": container, "trigger_id": trig,
		"team": map[string]any{"id": teamID, "domain": s.opts.TeamDomain}, "enterprise": nil, "is_enterprise_install": false,
		"channel": map[string]any{"id": ch.ID, "name": chName}, "message": s.wireMessage(m, false),
		"state": map[string]any{"values": map[string]any{}}, "response_url": resp, "actions": []any{action},
	}
	b, _ := json.Marshal(payload)
	s.queue(&envelope{Envelope: Envelope{Kind: KindInteractive, Topic: "block_actions", Payload: b}}, now)
	return nil
}

// CommandSpec is a person running a slash command in a channel.
type CommandSpec struct {
	User    string `json:"user"`
	Channel string `json:"channel"`
	Command string `json:"command"` // "/harvest"
	Text    string `json:"text"`
}

// Command delivers a slash command.
func (s *Server) Command(spec CommandSpec) error {
	if !strings.HasPrefix(spec.Command, "/") || len(spec.Command) < 2 || strings.ContainsAny(spec.Command, " \t") {
		return fmt.Errorf("command %q: a slash and a word, like /harvest", spec.Command)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	u := s.st.users[spec.User]
	if u == nil || u.IsBot {
		return fmt.Errorf("no person %q", spec.User)
	}
	ch := s.st.chans[spec.Channel]
	if ch == nil {
		return fmt.Errorf("no channel %q", spec.Channel)
	}
	if !s.st.member(ch, u.ID) {
		return fmt.Errorf("%s is not in %s", u.ID, ch.ID)
	}
	trig, resp := s.interactionHandles(u.ID, ch.ID, "", "", now)
	chName := ch.Name
	if ch.IM {
		chName = "directmessage"
	}
	fields := map[string]string{
		"token": verificationToken, "team_id": teamID, "team_domain": s.opts.TeamDomain,
		"channel_id": ch.ID, "channel_name": chName, "user_id": u.ID, "user_name": u.Name,
		"command": spec.Command, "text": spec.Text, "api_app_id": appID, "is_enterprise_install": "false",
		"response_url": resp, "trigger_id": trig,
	}
	b, _ := json.Marshal(fields)
	s.queue(&envelope{Envelope: Envelope{Kind: KindSlashCommands, Topic: spec.Command, Payload: b}}, now)
	return nil
}

// response is a message sent to a response_url or in a slash command's
// ack.
type response struct {
	Text            string          `json:"text"`
	Blocks          json.RawMessage `json:"blocks"`
	ResponseType    string          `json:"response_type"` // ephemeral (default) or in_channel
	ReplaceOriginal bool            `json:"replace_original"`
	DeleteOriginal  bool            `json:"delete_original"`
	ThreadTS        string          `json:"thread_ts"`
}

// respond shows a response: in the channel as the bot, replacing or
// deleting the original message, or to its person only.
func (s *Server) respond(t *responseTarget, r response, via string, now time.Time) error {
	ch := s.st.chans[t.channel]
	if ch == nil {
		return fmt.Errorf("channel %s is gone", t.channel)
	}
	if r.Text == "" && r.Blocks == nil && !r.DeleteOriginal {
		return fmt.Errorf("no_text")
	}
	if r.Blocks != nil && string(r.Blocks) == "null" {
		r.Blocks = nil
	}
	if r.ReplaceOriginal || r.DeleteOriginal {
		m := s.st.msg(ch.ID, t.messageTS)
		if m == nil || m.Deleted || m.BotID == "" {
			return fmt.Errorf("no original message of the app's to change")
		}
		if r.DeleteOriginal {
			s.deleted(ch, m, now)
			return nil
		}
		prev := cloneMessage(m)
		m.Text, m.Blocks = r.Text, r.Blocks
		m.Edits++
		m.LastEditAt = now
		s.edited(ch, m, &prev, now, false)
		return nil
	}
	thread := r.ThreadTS
	if thread == "" {
		thread = t.threadTS
	}
	if r.ResponseType == "in_channel" {
		m := &Message{Channel: ch.ID, User: s.st.botUser, BotID: botID, Text: r.Text, Blocks: r.Blocks, ThreadTS: thread}
		s.post(ch, m, now)
		return nil
	}
	s.st.ephemerals = append(s.st.ephemerals, Ephemeral{Channel: ch.ID, User: t.user, TS: s.st.newTS(now), Text: r.Text, Blocks: r.Blocks, ThreadTS: thread, Via: via})
	return nil
}

// commandResponse shows the answer a slash command's ack carried.
func (s *Server) commandResponse(e *envelope, payload json.RawMessage, now time.Time) {
	var f map[string]string
	json.Unmarshal(e.Payload, &f)
	var r response
	if err := json.Unmarshal(payload, &r); err != nil {
		s.logger.Warn("slash command answer is not a message", "payload", string(payload))
		return
	}
	if err := s.respond(&responseTarget{channel: f["channel_id"], user: f["user_id"]}, r, "ack", now); err != nil {
		s.logger.Warn("slash command answer", "err", err)
	}
}

func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	status, answer := s.responseURL(r.PathValue("id"), b)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(answer)
}

// responseURL handles a POST to a response_url (s.mu held).
func (s *Server) responseURL(id string, b []byte) (int, []byte) {
	now := s.clock.Now()
	t := s.st.responses[id]
	if t == nil || !now.Before(t.expires) || t.uses >= 5 {
		return http.StatusNotFound, []byte(`{"ok":false,"error":"expired_url"}`)
	}
	var resp response
	if err := json.Unmarshal(b, &resp); err != nil {
		return http.StatusBadRequest, []byte(`{"ok":false,"error":"invalid_payload"}`)
	}
	if err := s.respond(t, resp, "response_url", now); err != nil {
		out, _ := json.Marshal(map[string]any{"ok": false, "error": err.Error()})
		return http.StatusBadRequest, out
	}
	t.uses++
	return http.StatusOK, []byte(`{"ok":true}`)
}
