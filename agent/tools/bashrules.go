package tools

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Bash rules are globs on commands, but a command line is rarely one command:
// "cd /workspace && rm -rf ./build", "make || bash -c 'rm -rf /'". So the
// command line is split the way a shell would split it, just enough to find
// every simple command in it:
//
//   - lists and pipelines (; & && || | |& and newlines), subshells ( ),
//     groups { }, and the commands inside $( ), backticks and <( ) >( );
//   - quotes removed ('a b' and "a b" are one word), redirections dropped;
//   - leading VAR=value assignments, shell keywords (if, then, do, !, ...)
//     and wrappers (sudo, env, command, exec, nohup, time, nice, xargs)
//     dropped, each form tried;
//   - the string given to bash -c, sh -c and eval parsed again, recursively.
//
// Each simple command, its words joined by single spaces, is a candidate; so
// is the whole command line with its whitespace collapsed (for patterns like
// "curl * | sh"). An rm with a recursive flag (-r, -R, --recursive, -rf,
// -fr, ...) is also tried as "rm -rf TARGET" for each target, cleaned
// ("./" is "."), so one rule covers every spelling. A deny rule that matches
// any candidate denies the command. When the default is deny, every simple
// command needs an allow rule that matches one of its forms ("sudo make" is
// allowed by "make *"); the whole line never allows, or "echo *" would allow
// "echo x && rm -rf ~".

// maxNesting bounds recursion into $( ), bash -c and eval.
const maxNesting = 8

// bashDecision is the outcome of checking a command against the rules.
type bashDecision struct {
	allowed bool
	rule    *BashRule // the deciding rule, if one decided
	segment string    // the candidate it matched (or none matched)
}

func (p Policy) checkBash(command string) bashDecision {
	parsed := parseCommand(command)
	for i := range p.Bash {
		r := &p.Bash[i]
		if r.Action != Deny {
			continue
		}
		for _, c := range parsed.all() {
			if globMatch(r.Pattern, c) {
				return bashDecision{rule: r, segment: c}
			}
		}
	}
	if parsed.tooDeep && len(p.Bash) > 0 {
		return bashDecision{segment: fmt.Sprintf("(nested more than %d levels deep)", maxNesting)}
	}
	if p.BashDefault != Deny {
		return bashDecision{allowed: true}
	}
	// Default deny: every simple command needs an allow rule matching one of
	// its forms ("sudo make" is allowed by "make *"). The whole line never
	// allows: "echo *" must not allow "echo x && rm -rf ~".
	if len(parsed.commands) == 0 {
		return bashDecision{segment: parsed.whole}
	}
	for _, forms := range parsed.commands {
		if !slices.ContainsFunc(forms, p.bashAllows) {
			return bashDecision{segment: forms[0]}
		}
	}
	return bashDecision{allowed: true}
}

func (p Policy) bashAllows(c string) bool {
	for _, r := range p.Bash {
		if r.Action == Allow && globMatch(r.Pattern, c) {
			return true
		}
	}
	return false
}

// parsedCommand is a command line split for the rules.
type parsedCommand struct {
	whole    string     // the line with its whitespace collapsed
	commands [][]string // each simple command's forms, as written first
	tooDeep  bool
}

// all returns the whole line and every form of every simple command.
func (pc parsedCommand) all() []string {
	out := []string{pc.whole}
	for _, forms := range pc.commands {
		out = append(out, forms...)
	}
	return out
}

// parseCommand finds every simple command in a command line, recursing into
// substitutions and shell strings.
func parseCommand(command string) parsedCommand {
	pc := parsedCommand{whole: strings.Join(strings.Fields(command), " ")}
	var visit func(src string, depth int)
	visit = func(src string, depth int) {
		if depth > maxNesting {
			pc.tooDeep = true
			return
		}
		cmds, nested := splitShell(src)
		for _, n := range nested {
			visit(n, depth+1)
		}
		for _, words := range cmds {
			var forms []string
			for _, form := range commandForms(words) {
				forms = append(forms, strings.Join(form, " "))
				forms = append(forms, rmForms(form)...)
				if inner, ok := shellString(form); ok {
					visit(inner, depth+1)
				}
			}
			if len(forms) > 0 {
				pc.commands = append(pc.commands, slices.Compact(forms))
			}
		}
	}
	visit(command, 0)
	return pc
}

var shellKeywords = map[string]bool{
	"if": true, "then": true, "else": true, "elif": true, "fi": true, "do": true, "done": true,
	"while": true, "until": true, "!": true, "case": true, "esac": true, "{": true, "}": true,
}

var wrappers = map[string]bool{
	"sudo": true, "env": true, "command": true, "builtin": true, "exec": true, "nohup": true,
	"time": true, "nice": true, "xargs": true, "doas": true, "stdbuf": true, "timeout": true,
}

// commandForms returns words as written (minus keywords and assignments)
// and with each leading wrapper removed in turn, with its options.
func commandForms(words []string) [][]string {
	for len(words) > 0 && (shellKeywords[words[0]] || isAssignment(words[0])) {
		words = words[1:]
	}
	if len(words) > 0 && shellKeywords[words[len(words)-1]] {
		words = words[:len(words)-1]
	}
	if len(words) == 0 {
		return nil
	}
	forms := [][]string{words}
	for len(words) > 0 && wrappers[path.Base(words[0])] {
		w := path.Base(words[0])
		words = words[1:]
		// The wrapper's options and assignments ("env -i A=b", "nice -n 5",
		// "timeout 10", "xargs -0 -n1").
		for len(words) > 0 && (strings.HasPrefix(words[0], "-") || isAssignment(words[0]) || (w == "timeout" && isDuration(words[0]))) {
			if w == "nice" && words[0] == "-n" && len(words) > 1 {
				words = words[1:]
			}
			words = words[1:]
		}
		if len(words) > 0 {
			forms = append(forms, words)
		}
	}
	return forms
}

func isAssignment(w string) bool {
	i := strings.IndexByte(w, '=')
	if i <= 0 {
		return false
	}
	for j, c := range w[:i] {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || j > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func isDuration(w string) bool {
	w = strings.TrimRight(w, "smhd")
	if w == "" {
		return false
	}
	for _, c := range w {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// rmForms returns "rm -rf TARGET" for every target of a recursive rm.
func rmForms(words []string) []string {
	if len(words) < 2 || path.Base(words[0]) != "rm" {
		return nil
	}
	recursive := false
	var targets []string
	opts := true
	for _, w := range words[1:] {
		switch {
		case opts && w == "--":
			opts = false
		case opts && strings.HasPrefix(w, "--"):
			if w == "--recursive" {
				recursive = true
			}
		case opts && strings.HasPrefix(w, "-") && len(w) > 1:
			if strings.ContainsAny(w[1:], "rR") {
				recursive = true
			}
		default:
			targets = append(targets, w)
		}
	}
	if !recursive {
		return nil
	}
	var out []string
	for _, t := range targets {
		out = append(out, "rm -rf "+t)
		if c := path.Clean(t); c != t {
			out = append(out, "rm -rf "+c)
		}
	}
	return out
}

// shellString returns the command string of "bash -c STR", "sh -lc STR" and
// "eval WORDS".
func shellString(words []string) (string, bool) {
	switch path.Base(words[0]) {
	case "eval":
		return strings.Join(words[1:], " "), len(words) > 1
	case "bash", "sh", "dash", "zsh", "ksh", "ash", "busybox":
		for i := 1; i < len(words); i++ {
			w := words[i]
			if !strings.HasPrefix(w, "-") || strings.HasPrefix(w, "--") {
				if path.Base(words[0]) == "busybox" && i == 1 {
					continue // busybox sh -c
				}
				return "", false
			}
			if strings.ContainsRune(w[1:], 'c') && i+1 < len(words) {
				return words[i+1], true
			}
		}
	}
	return "", false
}

// splitShell splits a command line into simple commands (each a list of
// words, quotes removed, redirections dropped) and returns the sources of
// nested commands ($( ), backticks, <( ), >( )) to be split in turn. It is
// forgiving: an unbalanced quote runs to the end of the input.
func splitShell(s string) (cmds [][]string, nested []string) {
	var words []string
	dropNext := false // the next word is a redirection's target
	endCmd := func() {
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words, dropNext = nil, false
	}
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n':
			i += 2 // line continuation
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case (c == '<' || c == '>') && i+1 < len(s) && s[i+1] == '(':
			inner, end := balanced(s, i+2)
			nested = append(nested, inner)
			i = end
		case c == '<' || c == '>' || (c == '&' && i+1 < len(s) && s[i+1] == '>'):
			i = skipRedirection(s, i)
			dropNext = true
		case c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' || c == ')':
			endCmd()
			i++
		default:
			w, end, inner := lexWord(s, i)
			nested = append(nested, inner...)
			i = end
			if isDigits(w) && i < len(s) && (s[i] == '<' || s[i] == '>') {
				continue // an fd number: "2>&1"
			}
			if dropNext {
				dropNext = false
				continue
			}
			words = append(words, w)
		}
	}
	endCmd()
	return cmds, nested
}

// skipRedirection skips a redirection operator (<, >, >>, <<, <<<, <&, >&,
// <>, >|, &>, &>>, <<-) starting at i.
func skipRedirection(s string, i int) int {
	if s[i] == '&' {
		i++
	}
	for i < len(s) && strings.IndexByte("<>&|-", s[i]) >= 0 {
		i++
	}
	return i
}

// lexWord reads one word starting at i: quotes removed, escapes applied,
// substitutions kept as written (and their sources returned in nested).
func lexWord(s string, i int) (word string, end int, nested []string) {
	var b strings.Builder
	sub := func(open int) {
		inner, e := balanced(s, open+2)
		nested = append(nested, inner)
		b.WriteString(s[open:e])
		i = e
	}
	tick := func() {
		e := strings.IndexByte(s[i+1:], '`')
		if e < 0 {
			e = len(s) - i - 1
		}
		nested = append(nested, s[i+1:i+1+e])
		b.WriteString(s[i:min(len(s), i+2+e)])
		i = min(len(s), i+2+e)
	}
	for i < len(s) {
		c := s[i]
		switch {
		case strings.IndexByte(" \t\n;&|()<>", c) >= 0:
			return b.String(), i, nested
		case c == '\\':
			if i+1 < len(s) {
				b.WriteByte(s[i+1])
			}
			i += 2
		case c == '\'':
			e := strings.IndexByte(s[i+1:], '\'')
			if e < 0 {
				e = len(s) - i - 1
			}
			b.WriteString(s[i+1 : i+1+e])
			i += e + 2
		case c == '"':
			i++
			for i < len(s) && s[i] != '"' {
				switch {
				case s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0:
					b.WriteByte(s[i+1])
					i += 2
				case s[i] == '$' && i+1 < len(s) && s[i+1] == '(':
					sub(i)
				case s[i] == '`':
					tick()
				default:
					b.WriteByte(s[i])
					i++
				}
			}
			i++ // the closing quote
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			sub(i)
		case c == '`':
			tick()
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), min(i, len(s)), nested
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// balanced returns the text from start up to the ")" that closes a "(" just
// before start, and the index after that ")".
func balanced(s string, start int) (string, int) {
	depth := 1
	for i := start; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			if j := strings.IndexByte(s[i+1:], '\''); j >= 0 {
				i += j + 1
			} else {
				i = len(s)
			}
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[start:i], i + 1
			}
		}
	}
	return s[start:], len(s)
}

// globMatch matches a whole string against a bash rule pattern (see
// BashRule). A pattern ending in " *" also matches without the arguments.
func globMatch(pattern, s string) bool {
	if wildMatch(pattern, s) {
		return true
	}
	if strings.HasSuffix(pattern, " *") && !strings.HasSuffix(pattern, `\ *`) {
		return wildMatch(strings.TrimSuffix(pattern, " *"), s)
	}
	return false
}

// wildMatch is iterative glob matching with backtracking to the last star:
// linear in practice, never exponential.
func wildMatch(p, s string) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if pi < len(p) {
			switch p[pi] {
			case '*':
				starP, starS = pi, si
				pi++
				continue
			case '?':
				pi++
				si++
				continue
			case '\\':
				if pi+1 < len(p) && p[pi+1] == s[si] {
					pi += 2
					si++
					continue
				}
			default:
				if p[pi] == s[si] {
					pi++
					si++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		si = starS
		pi = starP + 1
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
