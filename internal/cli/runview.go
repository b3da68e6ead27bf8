package cli

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/event"
)

// textView renders a turn for people: the agent's words as they stream, one
// line per tool call (with a spinner and the elapsed time on a terminal),
// and a summary with tokens and cost. Events come from the turn's goroutine;
// the spinner's goroutine only redraws the line of the running tool. Both
// take mu. close stops the spinner and waits for it.
type textView struct {
	w     io.Writer
	tty   bool
	color bool

	mu       sync.Mutex
	midLine  bool // the cursor is after text on an unfinished line
	streamed bool // the current assistant message arrived as deltas
	answered bool // the current turn printed an assistant message
	running  []*runningTool
	spinning bool // a spinner line is drawn
	frame    int

	stop chan struct{}
	done chan struct{}
}

type runningTool struct {
	id, summary string
	start       time.Time
	last        string // the last line of its live output
	partial     string // output after the last newline
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func newTextView(w io.Writer, tty bool) *textView {
	v := &textView{w: w, tty: tty, color: tty && os.Getenv("NO_COLOR") == "", stop: make(chan struct{}), done: make(chan struct{})}
	if tty {
		go v.spin()
	} else {
		close(v.done)
	}
	return v
}

func (v *textView) spin() {
	defer close(v.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
			v.mu.Lock()
			v.frame++
			v.drawSpinner()
			v.mu.Unlock()
		}
	}
}

func (v *textView) close() {
	select {
	case <-v.stop:
	default:
		close(v.stop)
	}
	<-v.done
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clearSpinner()
	v.endLine()
}

func (v *textView) style(code, s string) string {
	if !v.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// drawSpinner redraws the running tool's line (terminal only).
func (v *textView) drawSpinner() {
	if !v.tty || len(v.running) == 0 || v.midLine {
		return
	}
	r := v.running[0]
	label := r.summary
	if n := len(v.running); n > 1 {
		label += fmt.Sprintf(" (+%d more)", n-1)
	}
	tail := ""
	if r.last != "" {
		tail = "  " + v.style("2", clipRunes(r.last, 60))
	}
	fmt.Fprintf(v.w, "\r\x1b[K%s %s  %s%s", v.style("36", spinnerFrames[v.frame%len(spinnerFrames)]), label, v.style("2", fmtDuration(time.Since(r.start))), tail)
	v.spinning = true
}

func (v *textView) clearSpinner() {
	if v.spinning {
		fmt.Fprint(v.w, "\r\x1b[K")
		v.spinning = false
	}
}

func (v *textView) endLine() {
	if v.midLine {
		fmt.Fprintln(v.w)
		v.midLine = false
	}
}

// line prints a whole line, keeping the spinner below it.
func (v *textView) line(format string, args ...any) {
	v.clearSpinner()
	v.endLine()
	fmt.Fprintf(v.w, format+"\n", args...)
	v.drawSpinner()
}

func (v *textView) event(e event.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch p := e.Data.(type) {
	case event.TurnStarted:
		v.answered = false
	case event.AssistantDelta:
		v.answered = true
		v.clearSpinner()
		fmt.Fprint(v.w, p.Text)
		v.midLine = !strings.HasSuffix(p.Text, "\n")
		v.streamed = true
	case event.AssistantMessage:
		v.answered = true
		if !v.streamed {
			v.line("%s", p.Text)
		}
		v.endLine()
		v.streamed = false
	case event.Thinking:
		v.line("%s", v.style("2;3", "✻ "+strings.TrimSpace(p.Text)))
	case event.ToolStarted:
		v.running = append(v.running, &runningTool{id: p.CallID, summary: toolLabel(p.Summary, p.Tool), start: e.Time})
		if v.tty {
			v.clearSpinner()
			v.endLine()
			v.drawSpinner()
		} else {
			v.line("→ %s", toolLabel(p.Summary, p.Tool))
		}
	case event.ToolOutput:
		for _, r := range v.running {
			if r.id == p.CallID {
				r.partial += p.Text
				lines := strings.Split(r.partial, "\n")
				r.partial = lines[len(lines)-1]
				if len(r.partial) > 4096 {
					r.partial = r.partial[len(r.partial)-4096:]
				}
				for i := len(lines) - 2; i >= 0; i-- {
					if l := strings.TrimSpace(stripControl(lines[i])); l != "" {
						r.last = l
						break
					}
				}
			}
		}
	case event.ToolFinished:
		label := p.Tool
		for i, r := range v.running {
			if r.id == p.CallID {
				label = r.summary
				v.running = append(v.running[:i], v.running[i+1:]...)
				break
			}
		}
		dur := v.style("2", fmtDuration(time.Duration(p.DurationMS)*time.Millisecond))
		switch {
		case p.Blocked != "":
			v.line("%s %s  %s", v.style("33", "⊘"), label, v.style("33", "blocked: "+firstLineOf(p.Blocked, 160)))
		case p.IsError:
			v.line("%s %s  %s  %s", v.style("31", "✗"), label, dur, v.style("2", lastLineOf(p.Output, 160)))
		default:
			v.line("%s %s  %s", v.style("32", "✓"), label, dur)
		}
	case event.TodoUpdated:
		var b strings.Builder
		for _, it := range p.Items {
			mark := "☐"
			switch it.Status {
			case "in_progress":
				mark = "◐"
			case "completed":
				mark = "☑"
			}
			fmt.Fprintf(&b, "\n  %s %s", mark, it.Content)
		}
		v.line("todo:%s", b.String())
	case event.Compaction:
		how := "pruned old tool output"
		if p.Summarized {
			how = "summarised older history"
		}
		v.line("%s compacted the conversation (%s): %s → %s tokens", v.style("36", "↻"), how, commas(int64(p.BeforeTokens)), commas(int64(p.AfterTokens)))
	case event.LoopDetected:
		v.line("%s loop detected (%s): %s — %s", v.style("33", "⚠"), p.Pattern, p.Detail, p.Action)
	case event.Stuck:
		v.line("%s the agent is stuck (STUCK.md in %s):\n%s", v.style("33", "⚠"), p.Repo, indent(p.Text))
	case event.TurnFinished:
		if !v.answered && strings.TrimSpace(p.Result) != "" {
			// A generic terminal CLI answers only on its screen.
			v.line("%s", strings.TrimRight(printable(p.Result), "\n"))
		}
		v.line("\n%s done: %s", v.style("32", "✓"), turnStats(p.Steps, p.DurationMS, p.Usage, p.CostUSD))
	case event.TurnFailed:
		v.line("\n%s failed (%s): %s", v.style("31", "✗"), p.Kind, p.Error)
		if p.Usage != (event.Usage{}) {
			v.line("  %s", turnStats(-1, -1, p.Usage, p.Cost))
		}
	case event.TurnCancelled:
		v.line("\n%s cancelled: %s", v.style("33", "✗"), p.Reason)
	}
}

func toolLabel(summary, tool string) string {
	if summary != "" {
		return summary
	}
	return tool
}

func turnStats(steps int, ms int64, u event.Usage, cost float64) string {
	var parts []string
	if steps >= 0 {
		parts = append(parts, fmt.Sprintf("%d %s", steps, plural(steps, "step", "steps")))
	}
	if ms >= 0 {
		parts = append(parts, fmtDuration(time.Duration(ms)*time.Millisecond))
	}
	in := commas(u.InputTokens) + " in"
	if c := u.CacheReadTokens + u.CacheWriteTokens; c > 0 {
		in += fmt.Sprintf(" (+%s cached)", commas(c))
	}
	parts = append(parts, in+", "+commas(u.OutputTokens)+" out tokens", fmt.Sprintf("$%.4f", cost))
	return strings.Join(parts, " · ")
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func firstLineOf(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return clipRunes(s, n)
}

func lastLineOf(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return clipRunes(s, n)
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ")
}

// stripControl drops control characters (escape sequences, carriage
// returns) from a line of command output shown in the spinner line.
// printable is s without control characters except newlines and tabs.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

func stripControl(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}
