package slacksim

import (
	"encoding/json"
	"strings"
)

// The Web API's objects, shaped as Slack's description requires
// (objs_message, objs_user, objs_conversation: their additionalProperties
// are false, so only described fields are sent). Slack itself also
// sends a message's app_id and edited {user, ts}, which the description
// forbids; they are left out, and nothing Harvest does needs them.

func (s *Server) botProfile() map[string]any {
	icon := s.url + "/static/bot_48.png"
	return map[string]any{"id": botID, "deleted": false, "name": s.opts.BotName, "updated": s.st.users[s.st.botUser].updatedAt(),
		"app_id": appID, "icons": map[string]any{"image_36": icon, "image_48": icon, "image_72": icon}, "team_id": teamID}
}

func (u *User) updatedAt() int64 { return 1700000000 }

// richText is the rich_text block Slack's clients add to what a person
// types.
func richText(text string) []any {
	return []any{map[string]any{"type": "rich_text", "block_id": "sim" + strings.Repeat("0", 2),
		"elements": []any{map[string]any{"type": "rich_text_section",
			"elements": []any{map[string]any{"type": "text", "text": text}}}}}}
}

// wireMessage is a message as the Web API returns it (objs_message).
func (s *Server) wireMessage(m *Message, _ bool) map[string]any {
	out := map[string]any{"type": "message", "ts": m.TS, "user": m.User, "text": m.Text}
	if m.BotID != "" {
		out["bot_id"] = m.BotID
		out["bot_profile"] = s.botProfile()
		out["team"] = teamID
	} else {
		out["team"] = teamID
		if m.ClientID != "" {
			out["client_msg_id"] = m.ClientID
		}
	}
	if m.Blocks != nil {
		out["blocks"] = json.RawMessage(m.Blocks)
	} else if m.BotID == "" {
		out["blocks"] = richText(m.Text)
	}
	if m.ThreadTS != "" {
		out["thread_ts"] = m.ThreadTS
		if m.ThreadTS != m.TS {
			if p := s.st.msg(m.Channel, m.ThreadTS); p != nil {
				out["parent_user_id"] = p.User
			}
			if m.Broadcast {
				out["subtype"] = "thread_broadcast"
			}
		}
	}
	if len(m.Replies) > 0 {
		var users []string
		for _, r := range m.Replies {
			if rm := s.st.msg(m.Channel, r); rm != nil && !containsStr(users, rm.User) {
				users = append(users, rm.User)
			}
		}
		out["reply_count"] = len(m.Replies)
		out["reply_users"] = users
		out["reply_users_count"] = len(users)
		out["latest_reply"] = m.Replies[len(m.Replies)-1]
		out["subscribed"] = false
	}
	if len(m.Reactions) > 0 {
		rs := []any{}
		for _, r := range m.Reactions {
			rs = append(rs, map[string]any{"name": r.Name, "users": r.Users, "count": len(r.Users)})
		}
		out["reactions"] = rs
	}
	return out
}

func containsStr(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// wireUser is a user as users.info returns it (objs_user).
func (s *Server) wireUser(u *User) map[string]any {
	img := s.url + "/static/avatar_" + u.ID + ".png"
	profile := map[string]any{
		"real_name": u.RealName, "real_name_normalized": u.RealName,
		"display_name": u.Name, "display_name_normalized": u.Name,
		"avatar_hash": "g" + u.ID[1:], "title": "", "phone": "", "skype": "",
		"status_text": "", "status_emoji": "", "status_expiration": 0, "fields": map[string]any{},
		"first_name": u.RealName, "last_name": "", "team": teamID,
		"image_24": img, "image_32": img, "image_48": img, "image_72": img, "image_192": img, "image_512": img,
	}
	if u.Email != "" {
		profile["email"] = u.Email
	}
	if u.IsBot {
		profile["bot_id"] = botID
		profile["api_app_id"] = appID
		profile["always_active"] = true
	}
	return map[string]any{
		"id": u.ID, "team_id": teamID, "name": u.Name, "deleted": false, "color": "9f69e7",
		"real_name": u.RealName, "tz": "Europe/London", "tz_label": "Greenwich Mean Time", "tz_offset": 0,
		"profile": profile, "is_admin": false, "is_owner": false, "is_primary_owner": false,
		"is_restricted": false, "is_ultra_restricted": false, "is_bot": u.IsBot, "is_app_user": false,
		"updated": u.updatedAt(),
	}
}

// wireChannel is a conversation as conversations.info returns it
// (objs_conversation: a channel, or an IM).
func (s *Server) wireChannel(ch *Channel, numMembers bool) map[string]any {
	if ch.IM {
		return map[string]any{"id": ch.ID, "created": ch.Created, "is_im": true, "is_org_shared": false,
			"user": ch.User, "priority": 0, "is_user_deleted": false, "is_archived": false, "is_open": true}
	}
	blank := map[string]any{"value": "", "creator": "", "last_set": 0}
	out := map[string]any{
		"id": ch.ID, "name": ch.Name, "name_normalized": ch.Name, "created": ch.Created, "creator": ch.Creator,
		"is_archived": false, "is_channel": !ch.Private, "is_group": ch.Private, "is_general": false, "is_mpim": false,
		"is_im": false, "is_org_shared": false, "is_shared": false, "is_ext_shared": false, "is_pending_ext_shared": false,
		"is_private": ch.Private, "is_member": s.st.member(ch, s.st.botUser), "unlinked": 0,
		"topic": blank, "purpose": blank, "previous_names": []string{}, "parent_conversation": nil,
	}
	if numMembers {
		out["num_members"] = len(ch.Members)
	}
	return out
}
