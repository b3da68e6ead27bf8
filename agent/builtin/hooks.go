package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// Hooks run at four points of a turn, with Claude Code's names and JSON:
//
//	PreToolUse        before a tool runs: continue, block (the model gets the
//	                  reason as the tool's result) or interrupt (the turn ends)
//	PostToolUse       after it ran: continue, block (the reason is appended to
//	                  what the model sees) or interrupt
//	UserPromptSubmit  when a turn starts: block refuses the prompt
//	Stop              when the model is about to finish: block sends the reason
//	                  back and the turn goes on (at most maxStopContinues times)
//
// A hook is Go code (Hook) or a command from the agent definition. Command
// hooks run INSIDE the box (a definition may come from the repo, so its
// commands are as untrusted as the agent), get the JSON on stdin and answer
// like Claude Code's: exit 0 continues (stdout may hold
// {"decision":"block","reason":...} or {"continue":false,"stopReason":...}),
// exit 2 blocks with stderr as the reason, any other exit is an error that is
// reported and ignored.

// HookEvent is when a hook runs.
type HookEvent string

// Hook events.
const (
	PreToolUse       HookEvent = "PreToolUse"
	PostToolUse      HookEvent = "PostToolUse"
	UserPromptSubmit HookEvent = "UserPromptSubmit"
	Stop             HookEvent = "Stop"
)

// maxStopContinues bounds how often Stop hooks can keep a turn going.
const maxStopContinues = 3

// HookInput is what a hook is told (Claude Code's field names).
type HookInput struct {
	Event        HookEvent         `json:"hook_event_name"`
	SessionID    string            `json:"session_id"`
	Cwd          string            `json:"cwd"`
	ToolName     string            `json:"tool_name,omitempty"`
	ToolInput    json.RawMessage   `json:"tool_input,omitempty"`
	ToolResponse *HookToolResponse `json:"tool_response,omitempty"`
	Prompt       string            `json:"prompt,omitempty"`
	// LastMessage is the assistant's final text (Stop).
	LastMessage string `json:"last_assistant_message,omitempty"`
}

// HookToolResponse is a tool's result as PostToolUse hooks see it.
type HookToolResponse struct {
	Output  string `json:"output"`
	IsError bool   `json:"is_error"`
}

// Decision is what a hook decided.
type Decision int

// Decisions.
const (
	Continue Decision = iota
	Block
	Interrupt
)

// HookResult is a hook's answer.
type HookResult struct {
	Decision Decision
	Reason   string
}

// Hook is Go code run at a hook event. An error is reported (as a note to the
// log) and otherwise ignored: a broken hook must not wedge the agent.
type Hook interface {
	Handle(ctx context.Context, in HookInput) (HookResult, error)
}

// HookFunc adapts a function to Hook.
type HookFunc func(ctx context.Context, in HookInput) (HookResult, error)

// Handle implements Hook.
func (f HookFunc) Handle(ctx context.Context, in HookInput) (HookResult, error) { return f(ctx, in) }

// HookRegistration attaches a hook to an event, optionally only for tools
// whose name matches Matcher (a regexp; "" or "*" for all).
type HookRegistration struct {
	Event   HookEvent
	Matcher string
	Name    string // for reports
	Hook    Hook
}

type hookEntry struct {
	HookRegistration
	re *regexp.Regexp
}

func compileHooks(regs []HookRegistration) ([]hookEntry, error) {
	out := make([]hookEntry, 0, len(regs))
	for _, r := range regs {
		e := hookEntry{HookRegistration: r}
		if r.Matcher != "" && r.Matcher != "*" {
			re, err := regexp.Compile("^(?:" + r.Matcher + ")$")
			if err != nil {
				return nil, fmt.Errorf("hook %s: matcher %q: %w", r.Name, r.Matcher, err)
			}
			e.re = re
		}
		out = append(out, e)
	}
	return out, nil
}

func (e hookEntry) matches(ev HookEvent, tool string) bool {
	return e.Event == ev && (e.re == nil || tool == "" || e.re.MatchString(tool))
}

// runHooks runs the matching hooks in order until one blocks or interrupts.
// Errors are returned as notes (the caller reports them) and do not stop the
// others.
func runHooks(ctx context.Context, entries []hookEntry, in HookInput) (HookResult, []string) {
	var notes []string
	for _, e := range entries {
		if !e.matches(in.Event, in.ToolName) {
			continue
		}
		res, err := e.Hook.Handle(ctx, in)
		if err != nil {
			notes = append(notes, fmt.Sprintf("hook %s failed: %v", e.Name, err))
			continue
		}
		if res.Decision != Continue {
			if res.Reason == "" {
				res.Reason = "hook " + e.Name
			}
			return res, notes
		}
	}
	return HookResult{Decision: Continue}, notes
}

// commandHook runs a command inside the box.
type commandHook struct {
	box     *sandbox.Sandbox
	command string
	dir     string
	timeout time.Duration
}

func (h commandHook) Handle(ctx context.Context, in HookInput) (HookResult, error) {
	payload, err := json.Marshal(in)
	if err != nil {
		return HookResult{}, err
	}
	timeout := h.timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	var stdout, stderr bytes.Buffer
	st, err := h.box.Run(ctx, &sandbox.Cmd{
		Args: []string{"sh", "-c", h.command}, Dir: h.dir, Stdin: bytes.NewReader(payload),
		Stdout: &stdout, Stderr: &stderr, Timeout: timeout, OutputLimit: 64 << 10,
	})
	if err != nil {
		return HookResult{}, err
	}
	switch {
	case st.Code == 0:
		var out struct {
			Decision   string `json:"decision"`
			Reason     string `json:"reason"`
			Continue   *bool  `json:"continue"`
			StopReason string `json:"stopReason"`
		}
		if json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out) == nil {
			if out.Continue != nil && !*out.Continue {
				return HookResult{Decision: Interrupt, Reason: out.StopReason}, nil
			}
			if out.Decision == "block" {
				return HookResult{Decision: Block, Reason: out.Reason}, nil
			}
		}
		return HookResult{Decision: Continue}, nil
	case st.Code == 2:
		return HookResult{Decision: Block, Reason: strings.TrimSpace(stderr.String())}, nil
	case st.TimedOut:
		return HookResult{}, fmt.Errorf("%q timed out after %s", h.command, timeout)
	default:
		return HookResult{}, fmt.Errorf("%q: %s: %s", h.command, st, strings.TrimSpace(stderr.String()))
	}
}

// definitionHooks turns a definition's command hooks into registrations.
func definitionHooks(def *Definition, box *sandbox.Sandbox, dir string) []HookRegistration {
	var out []HookRegistration
	add := func(ev HookEvent, specs []HookSpec) {
		for i, s := range specs {
			out = append(out, HookRegistration{
				Event: ev, Matcher: s.Matcher, Name: fmt.Sprintf("%s[%d] %q", ev, i, s.Command),
				Hook: commandHook{box: box, command: s.Command, dir: dir, timeout: time.Duration(s.Timeout)},
			})
		}
	}
	add(PreToolUse, def.Hooks.PreTool)
	add(PostToolUse, def.Hooks.PostTool)
	add(UserPromptSubmit, def.Hooks.TurnStart)
	add(Stop, def.Hooks.Stop)
	return out
}

// AuditHook writes one JSON line per tool call to w: an audit log of what the
// agent did, independent of the event stream.
func AuditHook(w io.Writer, session string) HookRegistration {
	var mu sync.Mutex
	return HookRegistration{
		Event: PostToolUse, Name: "audit",
		Hook: HookFunc(func(ctx context.Context, in HookInput) (HookResult, error) {
			rec := struct {
				Time    time.Time       `json:"time"`
				Session string          `json:"session"`
				Tool    string          `json:"tool"`
				Input   json.RawMessage `json:"input"`
				IsError bool            `json:"is_error"`
				Bytes   int             `json:"output_bytes"`
			}{time.Now().UTC(), session, in.ToolName, in.ToolInput, in.ToolResponse != nil && in.ToolResponse.IsError, 0}
			if in.ToolResponse != nil {
				rec.Bytes = len(in.ToolResponse.Output)
			}
			b, err := json.Marshal(rec)
			if err != nil {
				return HookResult{}, err
			}
			mu.Lock()
			defer mu.Unlock()
			if _, err := w.Write(append(b, '\n')); err != nil {
				return HookResult{}, errors.New("writing the audit log: " + err.Error())
			}
			return HookResult{Decision: Continue}, nil
		}),
	}
}
