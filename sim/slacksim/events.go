package slacksim

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The events a message makes, as Slack sends them to an app subscribed
// to app_mention, message.channels, message.groups and message.im (the
// subscriptions Harvest's app asks for): in a conversation the bot is a
// member of, every new, edited or deleted message (the bot's own too:
// Slack sends them, and the app must ignore them) is a message event;
// a person's message that mentions the bot in a channel is also an
// app_mention.

// post stores a new message (the bot's or a person's) and queues its
// events.
func (s *Server) post(ch *Channel, m *Message, now time.Time) {
	m.TS = s.st.newTS(now)
	m.PostedAt = now
	s.st.msgs[ch.ID+"/"+m.TS] = m
	if m.ThreadTS == "" {
		s.st.order[ch.ID] = append(s.st.order[ch.ID], m.TS)
	} else {
		p := s.st.msg(ch.ID, m.ThreadTS)
		p.Replies = append(p.Replies, m.TS)
		if p.ThreadTS == "" {
			p.ThreadTS = p.TS
		}
	}
	if !s.st.member(ch, s.st.botUser) {
		return
	}
	ev := s.eventMessage(ch, m)
	ev["type"] = "message"
	ev["channel_type"] = ch.channelType()
	s.queueEvent(ch.topic(), ev, now)
	if m.BotID == "" && !ch.IM && strings.Contains(m.Text, "<@"+s.st.botUser+">") {
		ev := s.eventMessage(ch, m)
		ev["type"] = "app_mention"
		s.queueEvent("app.mention", ev, now)
	}
}

// eventMessage is the message as an event carries it.
func (s *Server) eventMessage(ch *Channel, m *Message) map[string]any {
	ev := map[string]any{"channel": ch.ID, "user": m.User, "text": m.Text, "ts": m.TS, "event_ts": m.TS, "team": teamID}
	if m.BotID != "" {
		ev["bot_id"] = m.BotID
		ev["app_id"] = appID
		ev["bot_profile"] = s.botProfile()
		if m.Blocks != nil {
			ev["blocks"] = json.RawMessage(m.Blocks)
		}
	} else {
		ev["client_msg_id"] = m.ClientID
		ev["blocks"] = richText(m.Text)
	}
	if m.ThreadTS != "" && m.ThreadTS != m.TS {
		ev["thread_ts"] = m.ThreadTS
		if p := s.st.msg(ch.ID, m.ThreadTS); p != nil {
			ev["parent_user_id"] = p.User
		}
	}
	return ev
}

// inner is a message inside a message_changed or message_deleted event.
func (s *Server) inner(ch *Channel, m *Message) map[string]any {
	ev := s.eventMessage(ch, m)
	delete(ev, "event_ts")
	delete(ev, "channel")
	ev["type"] = "message"
	if m.EditedTS != "" {
		ev["edited"] = map[string]any{"user": m.User, "ts": m.EditedTS}
	}
	return ev
}

// edited queues the message_changed event of an edit.
func (s *Server) edited(ch *Channel, m *Message, prev *Message, now time.Time, _ bool) {
	ts := s.st.newTS(now)
	m.EditedTS = ts
	if !s.st.member(ch, s.st.botUser) {
		return
	}
	s.queueEvent(ch.topic(), map[string]any{
		"type": "message", "subtype": "message_changed", "hidden": true, "channel": ch.ID,
		"ts": ts, "event_ts": ts, "channel_type": ch.channelType(),
		"message": s.inner(ch, m), "previous_message": s.inner(ch, prev),
	}, now)
}

// deleted marks a message deleted and queues message_deleted.
func (s *Server) deleted(ch *Channel, m *Message, now time.Time) {
	m.Deleted = true
	if m.ThreadTS == "" || m.ThreadTS == m.TS {
		if len(m.Replies) == 0 {
			s.st.order[ch.ID] = remove(s.st.order[ch.ID], m.TS)
		}
	} else if p := s.st.msg(ch.ID, m.ThreadTS); p != nil {
		p.Replies = remove(p.Replies, m.TS)
	}
	if !s.st.member(ch, s.st.botUser) {
		return
	}
	ts := s.st.newTS(now)
	// The "message" topic of Slack's description is this event.
	s.queueEvent("message", map[string]any{
		"type": "message", "subtype": "message_deleted", "hidden": true, "channel": ch.ID,
		"ts": ts, "deleted_ts": m.TS, "event_ts": ts, "channel_type": ch.channelType(),
		"previous_message": s.inner(ch, m),
	}, now)
}

func remove(l []string, x string) []string {
	out := l[:0]
	for _, y := range l {
		if y != x {
			out = append(out, y)
		}
	}
	return out
}

// queueEvent wraps an event as Slack's Events API does (event_callback)
// and queues its envelope.
func (s *Server) queueEvent(topic string, ev map[string]any, now time.Time) {
	s.st.seq++
	payload := map[string]any{
		"token": verificationToken, "team_id": teamID, "api_app_id": appID, "event": ev,
		"type": "event_callback", "event_id": fmt.Sprintf("Ev%010d", s.st.seq), "event_time": now.Unix(),
		"authorizations": []any{map[string]any{"enterprise_id": nil, "team_id": teamID, "user_id": s.st.botUser,
			"is_bot": true, "is_enterprise_install": false}},
		// Deprecated by Slack (authorizations replaces it) but still
		// sent, and required by its wrapper schema.
		"authed_users":          []string{s.st.botUser},
		"is_ext_shared_channel": false,
		"event_context":         "4-" + randHex(20),
	}
	b, _ := json.Marshal(payload)
	s.queue(&envelope{Envelope: Envelope{Kind: KindEventsAPI, Topic: topic, Payload: b}}, now)
}

// PostSpec is a person's message: in Channel (an ID), as User, in the
// thread of ThreadTS if set. Mention the bot with "<@BOTUSER>" in Text
// (Tokens().BotUserID).
type PostSpec struct {
	User     string `json:"user"`
	Channel  string `json:"channel"`
	Text     string `json:"text"`
	ThreadTS string `json:"thread_ts"`
}

// Post posts a message as a person, with the events Slack would send.
func (s *Server) Post(spec PostSpec) (Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	u := s.st.users[spec.User]
	if u == nil || u.IsBot {
		return Message{}, fmt.Errorf("no person %q", spec.User)
	}
	ch := s.st.chans[spec.Channel]
	if ch == nil {
		return Message{}, fmt.Errorf("no channel %q", spec.Channel)
	}
	if !s.st.member(ch, u.ID) {
		return Message{}, fmt.Errorf("%s is not in %s", u.ID, ch.ID)
	}
	if strings.TrimSpace(spec.Text) == "" {
		return Message{}, fmt.Errorf("empty text")
	}
	m := &Message{Channel: ch.ID, User: u.ID, Text: spec.Text, ClientID: uuid()}
	if spec.ThreadTS != "" {
		p := s.st.msg(ch.ID, spec.ThreadTS)
		if p == nil || p.Deleted {
			return Message{}, fmt.Errorf("no message %s in %s to reply to", spec.ThreadTS, ch.ID)
		}
		if p.ThreadTS != "" && p.ThreadTS != p.TS {
			p = s.st.msg(ch.ID, p.ThreadTS)
		}
		m.ThreadTS = p.TS
	}
	s.post(ch, m, now)
	return cloneMessage(m), nil
}

// EditSpec changes a person's message's text.
type EditSpec struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
	Text    string `json:"text"`
}

// Edit edits a person's message (message_changed).
func (s *Server) Edit(spec EditSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m, err := s.personMessage(spec.Channel, spec.TS)
	if err != nil {
		return err
	}
	prev := cloneMessage(m)
	m.Text = spec.Text
	m.LastEditAt = s.clock.Now()
	s.edited(ch, m, &prev, s.clock.Now(), true)
	return nil
}

// Delete deletes a person's message (message_deleted).
func (s *Server) Delete(channel, ts string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m, err := s.personMessage(channel, ts)
	if err != nil {
		return err
	}
	s.deleted(ch, m, s.clock.Now())
	return nil
}

func (s *Server) personMessage(channel, ts string) (*Channel, *Message, error) {
	ch := s.st.chans[channel]
	if ch == nil {
		return nil, nil, fmt.Errorf("no channel %q", channel)
	}
	m := s.st.msg(channel, ts)
	if m == nil || m.Deleted {
		return nil, nil, fmt.Errorf("no message %s in %s", ts, channel)
	}
	if m.BotID != "" {
		return nil, nil, fmt.Errorf("message %s is the bot's: people edit their own", ts)
	}
	return ch, m, nil
}

func uuid() string {
	h := randHex(16)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:]
}
