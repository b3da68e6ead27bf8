package slacksim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The workspace's fixed identifiers, shaped as Slack's description
// requires (defs_team, defs_app_id, defs_bot_id).
const (
	teamID = "T0HARVEST0"
	appID  = "A0HARVEST0"
	botID  = "B0HARVEST0"
	// verificationToken is the deprecated "token" field every payload
	// still carries.
	verificationToken = "sim-verification-token"
)

// User is a person (or the app's bot user) in the workspace.
type User struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	RealName string `json:"real_name"`
	Email    string `json:"email,omitempty"`
	IsBot    bool   `json:"is_bot,omitempty"`
}

// Channel is a conversation: a public or private channel, or a direct
// message (IM) between a person and the bot.
type Channel struct {
	ID      string   `json:"id"`
	Name    string   `json:"name,omitempty"`
	Private bool     `json:"private,omitempty"`
	IM      bool     `json:"im,omitempty"`
	User    string   `json:"user,omitempty"` // an IM's person
	Members []string `json:"members"`
	Created int64    `json:"created"`
	Creator string   `json:"creator,omitempty"`
}

// Reaction is an emoji on a message and who put it there.
type Reaction struct {
	Name  string   `json:"name"`
	Users []string `json:"users"`
}

// Message is a message in a channel or a thread, as the stand-in keeps
// it. BotID is set for the app's own messages (User is then the bot
// user).
type Message struct {
	Channel    string          `json:"channel"`
	TS         string          `json:"ts"`
	User       string          `json:"user"`
	BotID      string          `json:"bot_id,omitempty"`
	Text       string          `json:"text"`
	Blocks     json.RawMessage `json:"blocks,omitempty"`
	ThreadTS   string          `json:"thread_ts,omitempty"`
	Replies    []string        `json:"replies,omitempty"` // a parent's replies' ts, in order
	Reactions  []Reaction      `json:"reactions,omitempty"`
	EditedTS   string          `json:"edited_ts,omitempty"`
	Edits      int             `json:"edits,omitempty"` // chat.update calls that changed it
	Deleted    bool            `json:"deleted,omitempty"`
	ClientID   string          `json:"client_msg_id,omitempty"`
	Broadcast  bool            `json:"reply_broadcast,omitempty"`
	PostedAt   time.Time       `json:"posted_at"`
	LastEditAt time.Time       `json:"last_edit_at,omitzero"`
}

// Ephemeral is a message only one person saw (chat.postEphemeral, or a
// slash command's or a response_url's ephemeral answer).
type Ephemeral struct {
	Channel  string          `json:"channel"`
	User     string          `json:"user"`
	TS       string          `json:"ts"`
	Text     string          `json:"text"`
	Blocks   json.RawMessage `json:"blocks,omitempty"`
	ThreadTS string          `json:"thread_ts,omitempty"`
	Via      string          `json:"via"` // chat.postEphemeral, response_url, ack
}

// View is a modal opened with views.open.
type View struct {
	ID        string          `json:"id"`
	User      string          `json:"user"`
	TriggerID string          `json:"trigger_id"`
	View      json.RawMessage `json:"view"`
}

// trigger is a trigger_id handed out with an interaction: views.open
// takes it once, within 3 s (Slack's rule).
type trigger struct {
	user    string
	channel string
	expires time.Time
	used    bool
}

// responseTarget is where a response_url posts: the channel (and
// thread) the interaction came from, for its person.
type responseTarget struct {
	channel, user, threadTS, messageTS string
	uses                               int
	expires                            time.Time
}

type state struct {
	botToken, appToken string
	botUser            string

	users    map[string]*User
	userList []string
	chans    map[string]*Channel
	chanList []string
	msgs     map[string]*Message // channel+"/"+ts
	order    map[string][]string // channel → top-level ts, in order

	ephemerals []Ephemeral
	views      []View
	triggers   map[string]*trigger
	responses  map[string]*responseTarget

	calls      []Call
	envelopes  []*envelope
	conns      map[int]*conn
	connSeq    int
	lastUse    map[int]int // connection → when it last got an envelope
	useSeq     int
	loseAcks   LoseSpec // the next acks lost with their connection (LoseAcks)
	tickets    map[string]time.Time
	requestURL string // events (and the rest, unless set below); "": Socket Mode
	interURL   string // interactivity, if not requestURL
	commandURL string // slash commands, if not requestURL
	tamper     TamperSpec

	limits limiter

	lastMicros int64
	seq        int
}

func newState(opts Options, now time.Time) state {
	st := state{
		botToken:   "xoxb-1000000001-2000000001-" + randHex(12),
		appToken:   "xapp-1-" + appID + "-3000000001-" + randHex(32),
		users:      map[string]*User{},
		chans:      map[string]*Channel{},
		msgs:       map[string]*Message{},
		order:      map[string][]string{},
		triggers:   map[string]*trigger{},
		responses:  map[string]*responseTarget{},
		conns:      map[int]*conn{},
		lastUse:    map[int]int{},
		tickets:    map[string]time.Time{},
		requestURL: opts.RequestURL,
		interURL:   opts.InteractivityURL,
		commandURL: opts.CommandURL,
		limits:     newLimiter(opts.Limits),
	}
	bot := &User{ID: "U0BOT00001", Name: opts.BotName, RealName: opts.BotName, IsBot: true}
	st.users[bot.ID] = bot
	st.userList = append(st.userList, bot.ID)
	st.botUser = bot.ID
	st.lastMicros = now.UnixMicro()
	return st
}

func (st *state) nextID(prefix string) string {
	st.seq++
	return fmt.Sprintf("%s%09d", prefix, st.seq)
}

// newTS is a message timestamp: the clock's seconds and microseconds,
// strictly increasing (Slack's ts are unique per channel; these are
// unique in the workspace).
func (st *state) newTS(now time.Time) string {
	m := now.UnixMicro()
	if m <= st.lastMicros {
		m = st.lastMicros + 1
	}
	st.lastMicros = m
	return fmt.Sprintf("%d.%06d", m/1e6, m%1e6)
}

func (st *state) msg(channel, ts string) *Message { return st.msgs[channel+"/"+ts] }

func (st *state) member(ch *Channel, user string) bool { return slices.Contains(ch.Members, user) }

// channelType is the event's channel_type.
func (ch *Channel) channelType() string {
	switch {
	case ch.IM:
		return "im"
	case ch.Private:
		return "group"
	}
	return "channel"
}

// topic is the Events API topic of a message event in ch.
func (ch *Channel) topic() string {
	switch {
	case ch.IM:
		return "message.im"
	case ch.Private:
		return "message.groups"
	}
	return "message.channels"
}

// UserSpec makes a person. ID is assigned when empty.
type UserSpec struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	RealName string `json:"real_name"`
	Email    string `json:"email"`
}

// AddUser adds a person to the workspace.
func (s *Server) AddUser(spec UserSpec) (User, error) {
	if spec.Name == "" || strings.ContainsAny(spec.Name, " @<>") {
		return User{}, fmt.Errorf("user name %q: give a handle without spaces, @ or <>", spec.Name)
	}
	if spec.Email != "" && (!strings.Contains(spec.Email, "@") || strings.ContainsAny(spec.Email, " <>")) {
		return User{}, fmt.Errorf("user %s: email %q is not an address", spec.Name, spec.Email)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.st.users {
		if u.Name == spec.Name {
			return User{}, fmt.Errorf("user name %q: taken by %s", spec.Name, u.ID)
		}
	}
	id := spec.ID
	if id == "" {
		id = s.st.nextID("U")
	} else if !validID(id, 'U', 'W') {
		return User{}, fmt.Errorf("user id %q: Slack's are U or W and capitals or digits", id)
	} else if s.st.users[id] != nil {
		return User{}, fmt.Errorf("user id %s: taken", id)
	}
	if spec.RealName == "" {
		spec.RealName = spec.Name
	}
	u := &User{ID: id, Name: spec.Name, RealName: spec.RealName, Email: spec.Email}
	s.st.users[id] = u
	s.st.userList = append(s.st.userList, id)
	return *u, nil
}

func validID(id string, prefixes ...byte) bool {
	if len(id) < 3 || !slices.Contains(prefixes, id[0]) {
		return false
	}
	for _, c := range id[1:] {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ChannelSpec makes a channel. The bot is a member unless NoBot; Members
// are the people in it (user IDs).
type ChannelSpec struct {
	Name    string   `json:"name"`
	Private bool     `json:"private"`
	Members []string `json:"members"`
	NoBot   bool     `json:"no_bot"`
}

// AddChannel creates a channel.
func (s *Server) AddChannel(spec ChannelSpec) (Channel, error) {
	if spec.Name == "" || strings.ToLower(spec.Name) != spec.Name || strings.ContainsAny(spec.Name, " #.,") || len(spec.Name) > 80 {
		return Channel{}, fmt.Errorf("channel name %q: lower case, no spaces, periods, commas or #, at most 80 characters", spec.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.st.chans {
		if c.Name == spec.Name {
			return Channel{}, fmt.Errorf("channel #%s: exists (%s)", spec.Name, c.ID)
		}
	}
	ch := &Channel{ID: s.st.nextID("C"), Name: spec.Name, Private: spec.Private, Created: s.clock.Now().Unix()}
	for _, m := range spec.Members {
		if s.st.users[m] == nil {
			return Channel{}, fmt.Errorf("channel #%s: no user %s", spec.Name, m)
		}
		if !slices.Contains(ch.Members, m) {
			ch.Members = append(ch.Members, m)
		}
	}
	if !spec.NoBot {
		ch.Members = append(ch.Members, s.st.botUser)
	}
	if len(ch.Members) > 0 {
		ch.Creator = ch.Members[0]
	} else {
		ch.Creator = s.st.botUser
	}
	s.st.chans[ch.ID] = ch
	s.st.chanList = append(s.st.chanList, ch.ID)
	return cloneChannel(ch), nil
}

// OpenIM returns the direct-message channel between a person and the
// bot, making it the first time.
func (s *Server) OpenIM(user string) (Channel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.users[user] == nil || user == s.st.botUser {
		return Channel{}, fmt.Errorf("no user %s", user)
	}
	for _, id := range s.st.chanList {
		if c := s.st.chans[id]; c.IM && c.User == user {
			return cloneChannel(c), nil
		}
	}
	ch := &Channel{ID: s.st.nextID("D"), IM: true, User: user, Members: []string{user, s.st.botUser}, Created: s.clock.Now().Unix(), Creator: user}
	s.st.chans[ch.ID] = ch
	s.st.chanList = append(s.st.chanList, ch.ID)
	return cloneChannel(ch), nil
}

// JoinChannel adds people (or the bot) to a channel.
func (s *Server) JoinChannel(channel string, users ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.st.chans[channel]
	if ch == nil || ch.IM {
		return fmt.Errorf("no channel %s", channel)
	}
	for _, u := range users {
		if s.st.users[u] == nil {
			return fmt.Errorf("no user %s", u)
		}
		if !slices.Contains(ch.Members, u) {
			ch.Members = append(ch.Members, u)
		}
	}
	return nil
}

func cloneChannel(c *Channel) Channel {
	out := *c
	out.Members = slices.Clone(c.Members)
	return out
}

func cloneMessage(m *Message) Message {
	out := *m
	out.Replies = slices.Clone(m.Replies)
	out.Reactions = slices.Clone(m.Reactions)
	for i := range out.Reactions {
		out.Reactions[i].Users = slices.Clone(out.Reactions[i].Users)
	}
	return out
}

// Users lists the workspace's people and the bot.
func (s *Server) Users() []User {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]User, 0, len(s.st.userList))
	for _, id := range s.st.userList {
		out = append(out, *s.st.users[id])
	}
	return out
}

// Channels lists the conversations.
func (s *Server) Channels() []Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Channel, 0, len(s.st.chanList))
	for _, id := range s.st.chanList {
		out = append(out, cloneChannel(s.st.chans[id]))
	}
	return out
}

// Messages lists a channel's top-level messages in order (deleted ones
// too, marked); each parent's Replies name its thread.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, ts := range s.st.order[channel] {
		out = append(out, cloneMessage(s.st.msg(channel, ts)))
	}
	return out
}

// Thread lists a thread: its parent, then its replies in order.
func (s *Server) Thread(channel, ts string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.st.msg(channel, ts)
	if p == nil {
		return nil
	}
	out := []Message{cloneMessage(p)}
	for _, r := range p.Replies {
		out = append(out, cloneMessage(s.st.msg(channel, r)))
	}
	return out
}

// Message returns one message.
func (s *Server) Message(channel, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.st.msg(channel, ts)
	if m == nil {
		return Message{}, false
	}
	return cloneMessage(m), true
}

// Ephemerals lists the ephemeral messages shown, in order.
func (s *Server) Ephemerals() []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.st.ephemerals)
}

// Views lists the modals opened.
func (s *Server) Views() []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.st.views)
}
