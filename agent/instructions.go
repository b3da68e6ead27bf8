package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
)

// The instructions every agent gets, whatever its kind (the registry,
// package agents, composes them once and each kind delivers them its way:
// the builtin loop's system prompt, Claude Code's --append-system-prompt,
// OpenCode's instructions file), in this order (DESIGN.md, issue 14):
// Harvest's own, the workspaces, the git workflow when a workspace is on a
// session branch, then each repository's AGENTS.md (or else CLAUDE.md) and
// FORK.md. An agent definition's own instructions come last (the builtin
// agent's). Repository files are read inside the box, through the sandbox.

// HarvestInstructions is how every agent is told to work.
const HarvestInstructions = `You are a coding agent run by Harvest. You work alone, in the background, inside a sandbox: nobody is watching to answer questions, so make reasonable decisions and keep going until the task is done.

How to work:
- The repositories are checked out under /workspace (listed below). Work inside them.
- Use the tools to read code before changing it, make focused changes, and run the project's tests or build to check your work.
- Prefer small, verifiable steps. If a command fails, read the error and change your approach instead of repeating it.
- Do not try to reach the network or other machines: the sandbox has no network.
- When you are done, answer with a short summary of what you changed and how you checked it.

If you are blocked — the task cannot be done as asked, or something outside your control stops you — write STUCK.md at the root of the repository you were working in, explaining in plain language: the problem that blocks you, what you tried, and the current state of the work. Then stop.`

// gitWorkflow is said for each workspace on a session branch.
const gitWorkflow = `Git: you work on branch %s of %s. Commit your changes there with clear messages, and push them with ` + "`git push`" + ` before you say you are done: Harvest opens the pull request from what you pushed. Describe the change for its reviewers in .git/HARVEST_PR.md (inside .git, so it is never committed): the first line is the pull request's title (a short imperative sentence, no "#"), the rest its description in Markdown; write it again when a later change makes it wrong. If you change nothing, commit nothing and say why. Your commits are authored by Harvest's bot and credit the person who asked with a Co-authored-by trailer: keep the trailer. Pushing another branch, a tag, the default branch or a deletion is refused.`

// maxInstructionFile bounds AGENTS.md / CLAUDE.md / FORK.md / STUCK.md.
const maxInstructionFile = 64 << 10

// ComposeInstructions builds the instructions of an agent working in ws.
func ComposeInstructions(ctx context.Context, box *sandbox.Sandbox, ws []Workspace) (string, error) {
	var b strings.Builder
	b.WriteString(HarvestInstructions)
	if len(ws) > 0 {
		b.WriteString("\n\nWorkspaces:\n")
		for _, w := range ws {
			fmt.Fprintf(&b, "- %s: %s\n", w.Name, w.Path)
		}
	}
	for _, w := range ws {
		if w.Branch != "" {
			b.WriteString("\n" + fmt.Sprintf(gitWorkflow, w.Branch, w.Name) + "\n")
		}
	}
	for _, w := range ws {
		for _, group := range [][]string{{"AGENTS.md", "CLAUDE.md"}, {"FORK.md"}} {
			for _, name := range group {
				text, err := ReadSmall(ctx, box, path.Join(w.Path, name))
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return "", fmt.Errorf("reading %s in %s: %w", name, w.Name, err)
				}
				fmt.Fprintf(&b, "\n\n# %s of %s\n\n%s", name, w.Name, text)
				break // AGENTS.md wins over CLAUDE.md
			}
		}
	}
	return b.String(), nil
}

// ReadSmall reads a text file of the box, at most maxInstructionFile of it.
func ReadSmall(ctx context.Context, box *sandbox.Sandbox, p string) (string, error) {
	data, size, err := box.ReadAt(ctx, p, 0, maxInstructionFile)
	if err != nil {
		return "", err
	}
	text := string(data)
	if size > maxInstructionFile {
		text += fmt.Sprintf("\n\n[truncated: the file has %d bytes]", size)
	}
	return strings.TrimSpace(text), nil
}

// StuckState is each workspace's STUCK.md at the start of a turn, so that
// only a new or changed one is reported.
type StuckState map[string]string // workspace name → content ("" when absent)

// ReadStuck reads the workspaces' STUCK.md files.
func ReadStuck(ctx context.Context, box *sandbox.Sandbox, ws []Workspace) StuckState {
	st := StuckState{}
	for _, w := range ws {
		if text, err := ReadSmall(ctx, box, path.Join(w.Path, "STUCK.md")); err == nil {
			st[w.Name] = text
		}
	}
	return st
}

// NewStuck returns the workspace and text of a STUCK.md written since
// before.
func NewStuck(ctx context.Context, box *sandbox.Sandbox, ws []Workspace, before StuckState) (string, string, bool) {
	for name, text := range ReadStuck(ctx, box, ws) {
		if text != "" && text != before[name] {
			return name, text, true
		}
	}
	return "", "", false
}
