package slackbot

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/store"
)

// # slack_update
//
// Every agent of a session Slack started, whatever its kind, gets the MCP
// server "slack" with one tool, slack_update: a line of progress posted
// in the session's thread. The server is a Handler on the host, bridged
// into the box behind the session's own credential like the memory's
// (session.Config.HostMCP): the Slack token never enters the box. A line
// is cut to UpdateMax characters; at most one is posted per
// UpdateEvery per session (a call sooner is told when it may post
// again), and it goes through the app's limiter (rate.go) like every
// other call.

// MCPName is the name of the Slack app's MCP server.
const MCPName = "slack"

// UpdateMax bounds a slack_update line (characters).
const UpdateMax = 500

// UpdateEvery is the least time between two slack_update lines of one
// session.
const UpdateEvery = 5 * time.Second

// MCPServers are the host MCP servers of a session: slack_update for
// the sessions Slack started, none for the others.
func (b *Bot) MCPServers(s *store.Session) []agent.MCPServer {
	if s == nil || s.Owner != Owner {
		return nil
	}
	return []agent.MCPServer{{Name: MCPName, Source: "Harvest's Slack app (the session's thread)", Handler: b.updateHandler(s.ID)}}
}

type updateIn struct {
	Text string `json:"text" jsonschema:"one line of progress for the person who asked, in plain words (at most 500 characters)"`
}

type updateOut struct {
	Posted bool `json:"posted"`
}

func (b *Bot) updateHandler(session string) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "harvest-slack", Title: "Harvest's Slack thread", Version: "1"},
		&mcp.ServerOptions{Instructions: "This session was started from a Slack thread. slack_update posts one short line of progress there; use it for milestones the person would want to see (at most one every 5 seconds), not for every step."})
	mcp.AddTool(srv, &mcp.Tool{Name: "slack_update",
		Description: "Post one short line of progress in the Slack thread this session answers (at most 500 characters; at most one every 5 seconds)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in updateIn) (*mcp.CallToolResult, updateOut, error) {
			err := b.update(ctx, session, in.Text)
			return nil, updateOut{Posted: err == nil}, err
		})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true,
		// Served only through the session's bridge, with whatever Host.
		DisableLocalhostProtection: true,
	})
}

// update posts a slack_update line in the session's thread.
func (b *Bot) update(ctx context.Context, session, text string) error {
	text = strings.TrimSpace(text)
	if text == "" {
		return fmt.Errorf("slack_update: the text is empty: give one line of progress")
	}
	text = strings.Join(strings.Fields(text), " ")
	if r := []rune(text); len(r) > UpdateMax {
		text = string(r[:UpdateMax-1]) + "…"
	}
	now := time.Now()
	b.mu.Lock()
	if next := b.updated[session].Add(UpdateEvery); now.Before(next) {
		b.mu.Unlock()
		return fmt.Errorf("slack_update: one line every %s: post again after %s (in %s)", UpdateEvery, next.UTC().Format(time.TimeOnly), next.Sub(now).Round(100*time.Millisecond))
	}
	b.updated[session] = now
	b.mu.Unlock()
	th, err := b.st.SlackThread(ctx, session)
	if err != nil {
		return fmt.Errorf("slack_update: this session's Slack thread is not known: %w", err)
	}
	err = b.rate.call(ctx, func(ctx context.Context) error {
		_, _, err := b.api.PostMessageContext(ctx, th.Channel, slack.MsgOptionText("💬 "+text, false), slack.MsgOptionTS(th.ThreadTS))
		return err
	})
	if err != nil {
		return fmt.Errorf("slack_update: posting in the thread: %w (try again later)", err)
	}
	return nil
}
