package slacksim

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tokenKind is the credential a method takes.
type tokenKind int

const (
	tokenNone tokenKind = iota // api.test
	tokenBot                   // xoxb-
	tokenApp                   // xapp-
)

// method is one Web API method the stand-in serves.
type method struct {
	token tokenKind
	// tier is Slack's rate limit tier (1–4); 0 for the special limits
	// in defaultLimits.
	tier int
	h    func(s *Server, c *call) (map[string]any, string)
}

// methods are the Web API methods served (see Methods).
var methods = map[string]method{
	"api.test":              {tokenNone, 4, (*Server).apiTest},
	"apps.connections.open": {tokenApp, 1, (*Server).connectionsOpen},
	"auth.test":             {tokenBot, 4, (*Server).authTest},
	"chat.postMessage":      {tokenBot, 0, (*Server).chatPostMessage},
	"chat.update":           {tokenBot, 0, (*Server).chatUpdate},
	"chat.postEphemeral":    {tokenBot, 4, (*Server).chatPostEphemeral},
	"chat.getPermalink":     {tokenBot, 4, (*Server).chatGetPermalink},
	"chat.delete":           {tokenBot, 3, (*Server).chatDelete},
	"reactions.add":         {tokenBot, 3, (*Server).reactionsAdd},
	"reactions.remove":      {tokenBot, 2, (*Server).reactionsRemove},
	"conversations.replies": {tokenBot, 3, (*Server).conversationsReplies},
	"conversations.info":    {tokenBot, 3, (*Server).conversationsInfo},
	"users.info":            {tokenBot, 4, (*Server).usersInfo},
	"views.open":            {tokenBot, 4, (*Server).viewsOpen},
}

// Methods lists the Web API methods the stand-in serves, sorted.
func Methods() []string {
	out := make([]string, 0, len(methods))
	for m := range methods {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Call is one Web API request and its answer, as the request log keeps
// it. Params are the arguments as sent: strings from a form or query,
// JSON values from a JSON body.
type Call struct {
	Seq        int             `json:"seq"`
	Time       time.Time       `json:"time"`
	Method     string          `json:"method"`
	HTTPMethod string          `json:"http_method"`
	JSON       bool            `json:"json"`
	Token      string          `json:"token"` // bot, app, none, unknown
	Params     map[string]any  `json:"params"`
	Status     int             `json:"status"`
	RetryAfter int             `json:"retry_after,omitempty"`
	Response   json.RawMessage `json:"response"`
}

// call is a request being served.
type call struct {
	now    time.Time
	params map[string]any
	log    *Call
}

func (c *call) str(name string) string {
	switch v := c.params[name].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// raw is a JSON-valued argument (blocks, view): a string holding JSON
// in a form, the value itself in a JSON body.
func (c *call) raw(name string) (json.RawMessage, bool) {
	switch v := c.params[name].(type) {
	case nil:
		return nil, true
	case string:
		if v == "" {
			return nil, true
		}
		if !json.Valid([]byte(v)) {
			return nil, false
		}
		return json.RawMessage(v), true
	default:
		b, err := json.Marshal(v)
		return b, err == nil
	}
}

func (c *call) boolean(name string) bool {
	switch v := c.params[name].(type) {
	case bool:
		return v
	case string:
		return v == "true" || v == "1"
	}
	return false
}

// Calls returns the request log, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.st.calls)
}

// readParams reads a request's arguments: the query, then a form body
// (urlencoded or multipart) or a JSON object body.
func readParams(r *http.Request) (map[string]any, bool, error) {
	params := map[string]any{}
	for k, v := range r.URL.Query() {
		params[k] = v[0]
	}
	if r.Body == nil {
		return params, false, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return nil, false, err
	}
	switch ct {
	case "application/json":
		if len(bytes.TrimSpace(body)) == 0 {
			return params, true, nil // slack-go's apps.connections.open
		}
		var obj map[string]any
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&obj); err != nil {
			return nil, true, err
		}
		for k, v := range obj {
			if n, ok := v.(json.Number); ok {
				v, _ = n.Float64()
			}
			params[k] = v
		}
		return params, true, nil
	case "multipart/form-data":
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := r.ParseMultipartForm(4 << 20); err != nil {
			return nil, false, err
		}
		for k, v := range r.MultipartForm.Value {
			params[k] = v[0]
		}
	default:
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, false, err
		}
		for k, v := range vals {
			params[k] = v[0]
		}
	}
	return params, false, nil
}

// serveAPI serves a Web API call: decided under s.mu (apiCall), written
// without it.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	params, isJSON, perr := readParams(r)
	s.mu.Lock()
	log := s.apiCall(r, params, isJSON, perr)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if log.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(log.RetryAfter))
	}
	w.WriteHeader(log.Status)
	w.Write(log.Response)
	s.logger.Info("api", "method", log.Method, "status", log.Status, "response", string(log.Response))
}

// apiCall runs a call and logs it (s.mu held).
func (s *Server) apiCall(r *http.Request, params map[string]any, isJSON bool, perr error) Call {
	name := r.PathValue("method")
	now := s.clock.Now()
	log := Call{Seq: len(s.st.calls) + 1, Time: now, Method: name, HTTPMethod: r.Method, JSON: isJSON, Params: params}
	answer := func(status int, body map[string]any) {
		b, _ := json.Marshal(body)
		log.Status, log.Response = status, b
		s.st.calls = append(s.st.calls, log)
	}
	fail := func(code string) { answer(http.StatusOK, map[string]any{"ok": false, "error": code}) }
	m, ok := methods[name]
	if !ok {
		// Slack answers an unknown method 404 with this body.
		answer(http.StatusNotFound, map[string]any{"ok": false, "error": "unknown_method"})
		return log
	}
	if perr != nil {
		if isJSON {
			fail("invalid_json")
		} else {
			fail("invalid_form_data")
		}
		return log
	}
	if isJSON && r.Method == http.MethodGet {
		fail("invalid_post_type")
		return log
	}
	// The token: from the header, else the token argument (not with a
	// JSON body: Slack wants the header then).
	tok := bearer(r, params)
	log.Token = "none"
	if tok != "" {
		log.Token = "unknown"
		switch tok {
		case s.st.botToken:
			log.Token = "bot"
		case s.st.appToken:
			log.Token = "app"
		}
	}
	if m.token != tokenNone {
		switch {
		case tok == "":
			fail("not_authed")
			return log
		case log.Token == "unknown":
			fail("invalid_auth")
			return log
		case m.token == tokenBot && log.Token != "bot", m.token == tokenApp && log.Token != "app":
			fail("not_allowed_token_type")
			return log
		}
	}
	c := &call{now: now, params: params, log: &log}
	if after := s.st.limits.admit(now, name, m.tier, c.str("channel")); after > 0 {
		log.RetryAfter = after
		answer(http.StatusTooManyRequests, map[string]any{"ok": false, "error": "ratelimited"})
		return log
	}
	res, code := m.h(s, c)
	if code != "" {
		fail(code)
		return log
	}
	out := map[string]any{"ok": true}
	for k, v := range res {
		out[k] = v
	}
	answer(http.StatusOK, out)
	return log
}

func (s *Server) apiTest(c *call) (map[string]any, string) {
	if e := c.str("error"); e != "" {
		return nil, e
	}
	args := map[string]any{}
	for k, v := range c.params {
		if k != "token" {
			args[k] = v
		}
	}
	if len(args) == 0 {
		return nil, ""
	}
	return map[string]any{"args": args}, ""
}

func (s *Server) authTest(c *call) (map[string]any, string) {
	return map[string]any{
		"url": "https://" + s.opts.TeamDomain + ".slack.com/", "team": "Harvest Sim", "user": s.st.users[s.st.botUser].Name,
		"team_id": teamID, "user_id": s.st.botUser, "bot_id": botID, "is_enterprise_install": false,
	}, ""
}

// channelArg resolves a channel argument: an ID, a #name or name, or a
// person's ID (their direct messages with the bot).
func (s *Server) channelArg(arg string) *Channel {
	if ch := s.st.chans[arg]; ch != nil {
		return ch
	}
	name := strings.TrimPrefix(arg, "#")
	for _, id := range s.st.chanList {
		if ch := s.st.chans[id]; !ch.IM && ch.Name == name {
			return ch
		}
	}
	if u := s.st.users[arg]; u != nil && !u.IsBot {
		for _, id := range s.st.chanList {
			if ch := s.st.chans[id]; ch.IM && ch.User == arg {
				return ch
			}
		}
		ch := &Channel{ID: s.st.nextID("D"), IM: true, User: arg, Members: []string{arg, s.st.botUser}, Created: s.clock.Now().Unix(), Creator: arg}
		s.st.chans[ch.ID] = ch
		s.st.chanList = append(s.st.chanList, ch.ID)
		return ch
	}
	return nil
}

// content reads text and blocks: one of them (or attachments) is
// needed, blocks must be a JSON array of at most 50 objects with a type.
func content(c *call) (string, json.RawMessage, string) {
	text := c.str("text")
	blocks, ok := c.raw("blocks")
	if !ok {
		return "", nil, "invalid_blocks"
	}
	if blocks != nil {
		var bs []map[string]any
		if err := json.Unmarshal(blocks, &bs); err != nil || len(bs) > 50 {
			return "", nil, "invalid_blocks"
		}
		for _, b := range bs {
			if t, _ := b["type"].(string); t == "" {
				return "", nil, "invalid_blocks"
			}
		}
		if len(bs) == 0 {
			blocks = nil
		}
	}
	if text == "" && blocks == nil && c.str("attachments") == "" {
		return "", nil, "no_text"
	}
	if len(text) > 40000 {
		return "", nil, "msg_too_long"
	}
	return text, blocks, ""
}

func (s *Server) chatPostMessage(c *call) (map[string]any, string) {
	ch := s.channelArg(c.str("channel"))
	if ch == nil {
		return nil, "channel_not_found"
	}
	if !s.st.member(ch, s.st.botUser) {
		return nil, "not_in_channel"
	}
	text, blocks, code := content(c)
	if code != "" {
		return nil, code
	}
	m := &Message{Channel: ch.ID, User: s.st.botUser, BotID: botID, Text: text, Blocks: blocks, Broadcast: c.boolean("reply_broadcast")}
	if tts := c.str("thread_ts"); tts != "" {
		p := s.st.msg(ch.ID, tts)
		if p == nil || p.Deleted {
			return nil, "thread_not_found"
		}
		if p.ThreadTS != "" && p.ThreadTS != p.TS {
			p = s.st.msg(ch.ID, p.ThreadTS) // a reply's ts: its parent, as Slack does
		}
		m.ThreadTS = p.TS
	}
	s.post(ch, m, c.now)
	return map[string]any{"channel": ch.ID, "ts": m.TS, "message": s.wireMessage(m, false)}, ""
}

func (s *Server) botMessage(c *call) (*Channel, *Message, string) {
	ch := s.st.chans[c.str("channel")]
	if ch == nil {
		return nil, nil, "channel_not_found"
	}
	ts := c.str("ts")
	m := s.st.msg(ch.ID, ts)
	if m == nil || m.Deleted {
		return ch, nil, "message_not_found"
	}
	if m.BotID != botID {
		if c.log.Method == "chat.delete" {
			return ch, nil, "cant_delete_message"
		}
		return ch, nil, "cant_update_message"
	}
	return ch, m, ""
}

func (s *Server) chatUpdate(c *call) (map[string]any, string) {
	ch, m, code := s.botMessage(c)
	if code != "" {
		return nil, code
	}
	text, blocks, code := content(c)
	if code != "" && !(code == "no_text" && c.params["blocks"] != nil) {
		return nil, code
	}
	prev := cloneMessage(m)
	m.Text = text
	if _, given := c.params["blocks"]; given {
		m.Blocks = blocks
	}
	m.Edits++
	m.LastEditAt = c.now
	s.edited(ch, m, &prev, c.now, false)
	return map[string]any{"channel": ch.ID, "ts": m.TS, "text": m.Text, "message": s.wireMessage(m, true)}, ""
}

func (s *Server) chatDelete(c *call) (map[string]any, string) {
	ch, m, code := s.botMessage(c)
	if code != "" {
		return nil, code
	}
	s.deleted(ch, m, c.now)
	return map[string]any{"channel": ch.ID, "ts": m.TS}, ""
}

func (s *Server) chatPostEphemeral(c *call) (map[string]any, string) {
	ch := s.channelArg(c.str("channel"))
	if ch == nil {
		return nil, "channel_not_found"
	}
	user := c.str("user")
	// An unknown person is not in the channel either: Slack's answer
	// (user_not_found is not among chat.postEphemeral's errors).
	if s.st.users[user] == nil || !s.st.member(ch, user) {
		return nil, "user_not_in_channel"
	}
	text, blocks, code := content(c)
	if code != "" {
		return nil, code
	}
	ts := s.st.newTS(c.now)
	s.st.ephemerals = append(s.st.ephemerals, Ephemeral{Channel: ch.ID, User: user, TS: ts, Text: text, Blocks: blocks, ThreadTS: c.str("thread_ts"), Via: "chat.postEphemeral"})
	return map[string]any{"message_ts": ts}, ""
}

func (s *Server) permalink(ch *Channel, m *Message) string {
	u := "https://" + s.opts.TeamDomain + ".slack.com/archives/" + ch.ID + "/p" + strings.ReplaceAll(m.TS, ".", "")
	if m.ThreadTS != "" && m.ThreadTS != m.TS {
		u += "?thread_ts=" + m.ThreadTS + "&cid=" + ch.ID
	}
	return u
}

func (s *Server) chatGetPermalink(c *call) (map[string]any, string) {
	ch := s.st.chans[c.str("channel")]
	if ch == nil {
		return nil, "channel_not_found"
	}
	m := s.st.msg(ch.ID, c.str("message_ts"))
	if m == nil || m.Deleted {
		return nil, "message_not_found"
	}
	return map[string]any{"channel": ch.ID, "permalink": s.permalink(ch, m)}, ""
}

func validEmojiName(n string) bool {
	if n == "" || len(n) > 100 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '+' || r == '\'') {
			return false
		}
	}
	return true
}

func (s *Server) reactionTarget(c *call) (*Message, string, string) {
	ch := s.st.chans[c.str("channel")]
	if ch == nil {
		return nil, "", "channel_not_found"
	}
	if c.str("timestamp") == "" {
		return nil, "", "no_item_specified"
	}
	m := s.st.msg(ch.ID, c.str("timestamp"))
	if m == nil || m.Deleted {
		return nil, "", "message_not_found"
	}
	name := strings.Trim(c.str("name"), ":")
	if !validEmojiName(name) {
		return nil, "", "invalid_name"
	}
	return m, name, ""
}

func (s *Server) reactionsAdd(c *call) (map[string]any, string) {
	m, name, code := s.reactionTarget(c)
	if code != "" {
		return nil, code
	}
	for i, r := range m.Reactions {
		if r.Name == name {
			if slices.Contains(r.Users, s.st.botUser) {
				return nil, "already_reacted"
			}
			m.Reactions[i].Users = append(m.Reactions[i].Users, s.st.botUser)
			return nil, ""
		}
	}
	if len(m.Reactions) >= 23 {
		return nil, "too_many_emoji"
	}
	m.Reactions = append(m.Reactions, Reaction{Name: name, Users: []string{s.st.botUser}})
	return nil, ""
}

func (s *Server) reactionsRemove(c *call) (map[string]any, string) {
	m, name, code := s.reactionTarget(c)
	if code != "" {
		return nil, code
	}
	for i, r := range m.Reactions {
		if r.Name == name && slices.Contains(r.Users, s.st.botUser) {
			r.Users = slices.DeleteFunc(r.Users, func(u string) bool { return u == s.st.botUser })
			if len(r.Users) == 0 {
				m.Reactions = slices.Delete(m.Reactions, i, i+1)
			} else {
				m.Reactions[i] = r
			}
			return nil, ""
		}
	}
	return nil, "no_reaction"
}

func (s *Server) conversationsReplies(c *call) (map[string]any, string) {
	ch := s.st.chans[c.str("channel")]
	if ch == nil {
		return nil, "channel_not_found"
	}
	if !s.st.member(ch, s.st.botUser) {
		// A conversation the bot is not in is one it cannot see
		// (not_in_channel is not among conversations.replies' errors).
		return nil, "channel_not_found"
	}
	p := s.st.msg(ch.ID, c.str("ts"))
	if p == nil || p.Deleted {
		return nil, "thread_not_found"
	}
	if p.ThreadTS != "" && p.ThreadTS != p.TS {
		p = s.st.msg(ch.ID, p.ThreadTS)
	}
	all := append([]string{p.TS}, p.Replies...)
	start := 0
	if cur := c.str("cursor"); cur != "" {
		ts, ok := strings.CutPrefix(cur, "bmV4dF90czo") // base64("next_ts:")
		i := slices.Index(all, ts)
		if !ok || i < 0 {
			return nil, "invalid_cursor"
		}
		start = i
	}
	limit := 1000
	if l, err := strconv.Atoi(c.str("limit")); err == nil && l > 0 && l < limit {
		limit = l
	}
	end := min(start+limit, len(all))
	msgs := []any{}
	for _, ts := range all[start:end] {
		msgs = append(msgs, s.wireMessage(s.st.msg(ch.ID, ts), false))
	}
	out := map[string]any{"messages": msgs, "has_more": end < len(all)}
	if end < len(all) {
		out["response_metadata"] = map[string]any{"next_cursor": "bmV4dF90czo" + all[end]}
	}
	return out, ""
}

func (s *Server) conversationsInfo(c *call) (map[string]any, string) {
	ch := s.st.chans[c.str("channel")]
	if ch == nil || (ch.Private && !s.st.member(ch, s.st.botUser)) {
		return nil, "channel_not_found"
	}
	return map[string]any{"channel": s.wireChannel(ch, c.boolean("include_num_members"))}, ""
}

func (s *Server) usersInfo(c *call) (map[string]any, string) {
	u := s.st.users[c.str("user")]
	if u == nil {
		return nil, "user_not_found"
	}
	return map[string]any{"user": s.wireUser(u)}, ""
}

func (s *Server) viewsOpen(c *call) (map[string]any, string) {
	tid := c.str("trigger_id")
	tr := s.st.triggers[tid]
	switch {
	case tid == "" || tr == nil:
		return nil, "invalid_trigger_id"
	case tr.used || !c.now.Before(tr.expires):
		return nil, "expired_trigger_id"
	}
	raw, ok := c.raw("view")
	var v map[string]any
	if !ok || raw == nil || json.Unmarshal(raw, &v) != nil {
		return nil, "invalid_arguments"
	}
	if t, _ := v["type"].(string); t != "modal" {
		return nil, "invalid_arguments"
	}
	if _, ok := v["title"].(map[string]any); !ok {
		return nil, "invalid_arguments"
	}
	tr.used = true
	id := s.st.nextID("V")
	s.st.views = append(s.st.views, View{ID: id, User: tr.user, TriggerID: tid, View: raw})
	view := map[string]any{"id": id, "team_id": teamID, "type": "modal", "app_id": appID, "bot_id": botID,
		"title": v["title"], "blocks": orEmpty(v["blocks"]), "close": v["close"], "submit": v["submit"],
		"private_metadata": str(v["private_metadata"]), "callback_id": str(v["callback_id"]), "external_id": str(v["external_id"]),
		"state": map[string]any{"values": map[string]any{}}, "hash": randHex(8), "clear_on_close": false, "notify_on_close": false,
		"root_view_id": id, "previous_view_id": nil, "app_installed_team_id": teamID}
	return map[string]any{"view": view}, ""
}

func orEmpty(v any) any {
	if v == nil {
		return []any{}
	}
	return v
}

func str(v any) string { s, _ := v.(string); return s }
