package cli

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// terminalFlags choose the CLI the terminal agent runs in its PTY instead
// of Claude Code's TUI (harvest run and harvest session new).
type terminalFlags struct {
	command string
	done    string
	ready   string
	idle    time.Duration
}

func (t *terminalFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&t.command, "command", "", `with --agent terminal: the interactive CLI to run in the PTY instead of Claude Code, like "python3 -i -q" (split like a shell: quotes group words)`)
	fl.StringVar(&t.done, "done-pattern", "", "with --command: a regular expression matching the end of the CLI's output when it is ready for more (its prompt), which ends a turn")
	fl.StringVar(&t.ready, "ready-pattern", "", "with --command: matches the CLI's output once it is ready for its first input (default --done-pattern)")
	fl.DurationVar(&t.idle, "terminal-idle", 0, "with --command: output quiet this long ends a turn (the fallback to --done-pattern; default 30m)")
}

// spec is the terminal CLI the flags describe, nil when none is given.
func (t terminalFlags) spec(agent string) (*store.TerminalCLI, error) {
	if t.command == "" {
		if t.done != "" || t.ready != "" || t.idle != 0 {
			return nil, errors.New("--done-pattern, --ready-pattern and --terminal-idle go with --command (a CLI for --agent terminal)")
		}
		return nil, nil
	}
	if k, err := agents.Lookup(agent); err != nil || !k.Caps.TakesCommand {
		return nil, fmt.Errorf("--command is the CLI of --agent terminal; add --agent terminal")
	}
	args, err := splitWords(t.command)
	if err != nil {
		return nil, fmt.Errorf("--command: %w", err)
	}
	spec, problems := session.CheckTerminal(agent, &store.TerminalCLI{Command: args, DonePattern: t.done, ReadyPattern: t.ready, IdleTimeout: t.idle})
	if len(problems) > 0 {
		r := strings.NewReplacer("terminal.command", "--command", "terminal.done_pattern", "--done-pattern",
			"terminal.ready_pattern", "--ready-pattern", "terminal.idle_timeout", "--terminal-idle",
			"give done_pattern", "give --done-pattern", "or idle_timeout (quiet that ends a turn, like 20s)", "or --terminal-idle")
		for i, p := range problems {
			problems[i] = r.Replace(p)
		}
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return spec, nil
}

// compiled returns the patterns of a validated spec.
func compiled(t *store.TerminalCLI) (done, ready *regexp.Regexp) {
	if t.DonePattern != "" {
		done = regexp.MustCompile(t.DonePattern)
	}
	if t.ReadyPattern != "" {
		ready = regexp.MustCompile(t.ReadyPattern)
	}
	return done, ready
}

// splitWords splits s into words like a POSIX shell would, without
// expansions: blanks separate words; single quotes keep everything
// literally; double quotes keep blanks, a backslash in them escapes only
// \ " $ `; a backslash outside quotes escapes the next character.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 == len(rs) {
				return nil, errors.New("it ends with a lone backslash")
			}
			i++
			cur.WriteRune(rs[i])
			inWord = true
		case c == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, errors.New("a single quote is not closed")
			}
			cur.WriteString(string(rs[i+1 : j]))
			i, inWord = j, true
		case c == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\\\"$`", rs[j+1]) {
					j++
				}
				cur.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, errors.New("a double quote is not closed")
			}
			i, inWord = j, true
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
