package ghbot

import (
	"encoding/json"
	"strings"
)

// ignorable says, from a delivery's event and payload alone, that Harvest
// does nothing for it, and why (the result it is recorded with); "" when
// it may ask for work or change a cache, or cannot be told without asking
// GitHub. ServeHTTP stores such a delivery done at once, in the one write
// that stores it, and process gives the same answer first: most of what
// GitHub sends an app is of this kind (its own comments and their edits,
// issues and pull requests opened, ...), and queued they went through the
// one processing loop ahead of the comments people wait on for a 👀.
func (h *Hooks) ignorable(event string, payload []byte) string {
	switch event {
	case "issue_comment", "issues", "pull_request", "pull_request_review", "pull_request_review_comment", "check_suite":
	case "installation", "installation_repositories", "push":
		return "" // caches to refresh: always processed
	default:
		return "ignored: Harvest does not act on " + event + " events"
	}
	var p struct {
		Action string `json:"action"`
		Label  *struct {
			Name string `json:"name"`
		} `json:"label"`
		Sender *struct {
			Type string `json:"type"`
		} `json:"sender"`
		CheckSuite *struct {
			App *struct {
				ID int64 `json:"id"`
			} `json:"app"`
		} `json:"check_suite"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return "" // process says what is wrong with it
	}
	switch event {
	case "issue_comment":
		switch {
		case p.Action != "created" && p.Action != "edited":
			return "ignored: comment " + p.Action
		case p.Sender != nil && p.Sender.Type == "Bot":
			return "ignored: a bot's comment"
		}
	case "issues":
		switch {
		case p.Action == "labeled" && h.cfg.Label != "" && p.Label != nil && strings.EqualFold(p.Label.Name, h.cfg.Label):
		case p.Action == "assigned": // to Harvest? its login is asked of GitHub
		default:
			return "ignored: issue " + p.Action
		}
	case "pull_request":
		if p.Action != "closed" {
			return "ignored: pull request " + p.Action
		}
	case "pull_request_review":
		if p.Action != "submitted" {
			return "ignored: review " + p.Action
		}
	case "pull_request_review_comment":
		if p.Action != "created" {
			return "ignored: review comment " + p.Action
		}
	case "check_suite":
		switch {
		case p.Action != "completed":
			return "ignored: check suite " + p.Action
		case p.CheckSuite != nil && p.CheckSuite.App != nil && h.svc != nil && h.svc.gh.AppID() != 0 && p.CheckSuite.App.ID == h.svc.gh.AppID():
			// Harvest's own check run (checks.go): its failure is a
			// turn's, told already, not a check to fix.
			return "ignored: Harvest's own check suite"
		}
	}
	return ""
}
