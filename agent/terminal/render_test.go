package terminal

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScreen: the screen model turns what CLIs print into the text shown.
func TestScreen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rows   int
		cols   int
		mark   string // written before the mark
		chunks []string
		want   string
	}{
		{name: "lines", chunks: []string{"one\r\ntwo\r\n"}, want: "one\ntwo\n"},
		// A REPL's prompt keeps its trailing space (the done pattern
		// matches it); other lines lose theirs.
		{name: "prompt", chunks: []string{"out   \r\n$ "}, want: "out\n$ "},
		{name: "colours and titles", chunks: []string{"\x1b]0;title\x07\x1b[1;31mred\x1b[0m \x1b[?2004hplain\x1bP+q\x1b\\"}, want: "red plain"},
		{name: "carriage return overwrites", chunks: []string{"50%\r100%\r\n"}, want: "100%\n"},
		{name: "backspace and erase", chunks: []string{"abcd\b\b\x1b[K!"}, want: "ab!"},
		// Readline redraws the input after a prompt with CR and the prompt.
		{name: "readline redraw", mark: "$ ", chunks: []string{"echo hi\r$ echo hi\r\nhi\r\n$ "}, want: "echo hi\nhi\n$ "},
		// Claude Code's renderer: columns by CHA, lines by cursor down and
		// up, erase in line; a later frame rewrites a line in place.
		{name: "differential frames", chunks: []string{
			"\x1b[3G\x1b[38;5;246mRead \x1b[1m1\x1b[22m file\x1b[39m\x1b[K\r\x1b[1B\x1b[K\r\x1b[1B\x1b[38;5;231m●\x1b[3G\x1b[39mFixed:\x1b[10Ghello.txt\x1b[20Gnow\r\x1b[1B\x1b[K\r\x1b[1Bspinner 1",
			"\r\x1b[8Gx\r\x1b[3A\x1b[5Gwith\r\x1b[3B",
		}, want: "  Read 1 file\n    with\n● Fixed: hello.txt now\n\nspinnerx1"},
		{name: "cursor position and erase display", chunks: []string{"aaa\r\nbbb\r\nccc\x1b[2;2H\x1b[0JX"}, want: "aaa\nbX"},
		{name: "autowrap", cols: 4, chunks: []string{"abcdefg"}, want: "abcd\nefg"},
		{name: "utf-8 split across writes", chunks: []string{"h\xc3", "\xa9llo \xe2\x9c", "\xbb"}, want: "héllo ✻"},
		{name: "tab", chunks: []string{"a\tb"}, want: "a       b"},
		{name: "insert and delete characters", chunks: []string{"abcdef\r\x1b[2C\x1b[2P\x1b[1@"}, want: "ab ef"},
		{name: "save and restore", chunks: []string{"\x1b7abc\x1b8X\x1b[sY\x1b[u"}, want: "XYc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, cols := tc.rows, tc.cols
			if rows == 0 {
				rows = 10
			}
			if cols == 0 {
				cols = 40
			}
			s := newScreen(rows, cols)
			s.write([]byte(tc.mark))
			s.mark()
			for _, c := range tc.chunks {
				s.write([]byte(c))
			}
			if got := s.text(0); got != tc.want {
				t.Errorf("text %q, want %q", got, tc.want)
			}
		})
	}
}

// TestScreenScrollback: lines that scroll off the top stay in the text,
// and the scrollback is bounded.
func TestScreenScrollback(t *testing.T) {
	s := newScreen(3, 20)
	s.mark()
	for i := range 10 {
		s.write([]byte(strings.Repeat("x", i) + "\r\n"))
	}
	if got := strings.Count(s.text(0), "\n"); got != 10 {
		t.Errorf("%d lines, want 10: %q", got, s.text(0))
	}
	for range maxLines + 100 {
		s.write([]byte("y\r\n"))
	}
	if limit := maxLines + maxLines/4 + s.rows; len(s.lines) > limit {
		t.Errorf("%d lines kept, want at most %d", len(s.lines), limit)
	}
	if got := s.tail(2); got != "y\ny" {
		t.Errorf("tail %q", got)
	}
}

// TestOutputChunks: every byte is emitted, in order, in chunks of at most
// chunkSize; small writes wait flushDelay to be coalesced; big ones go at
// once.
func TestOutputChunks(t *testing.T) {
	o := newOutput(24, 80)
	o.setInTurn(true)
	var all []byte
	t0 := time.Now()
	for i := range 100 {
		b := bytes.Repeat([]byte{byte('a' + i%26)}, 1000)
		all = append(all, b...)
		o.Write(b)
	}
	var got []byte
	chunks, due := o.take(t0, false)
	for _, c := range chunks {
		if len(c) != chunkSize {
			t.Errorf("a chunk of %d bytes before the delay, want %d", len(c), chunkSize)
		}
		got = append(got, c...)
	}
	if len(chunks) != len(all)/chunkSize || due.IsZero() {
		t.Errorf("%d chunks (due %v), want %d whole chunks and the rest later", len(chunks), due, len(all)/chunkSize)
	}
	chunks, due = o.take(due, false)
	for _, c := range chunks {
		got = append(got, c...)
	}
	if !bytes.Equal(got, all) || !due.IsZero() {
		t.Errorf("got %d bytes (due %v), want all %d in order", len(got), due, len(all))
	}
	o.Write([]byte("x"))
	if chunks, due := o.take(time.Now(), false); len(chunks) != 0 || due.IsZero() {
		t.Errorf("one byte went out before the delay")
	}
	if chunks, _ := o.take(time.Now(), true); len(chunks) != 1 || string(chunks[0]) != "x" {
		t.Errorf("force: %q", chunks)
	}
}

// TestOutputBetweenTurns: between turns, output piles up to maxIdlePending
// and the oldest goes first; during a turn nothing is dropped.
func TestOutputBetweenTurns(t *testing.T) {
	o := newOutput(24, 80)
	big := bytes.Repeat([]byte("z"), maxIdlePending)
	o.Write(big)
	o.Write([]byte("tail"))
	if d := o.setInTurn(true); d != 4 {
		t.Errorf("dropped %d, want 4", d)
	}
	o.Write(big)
	chunks, _ := o.take(time.Now(), true)
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	if n != 2*maxIdlePending {
		t.Errorf("%d bytes in the turn, want %d", n, 2*maxIdlePending)
	}
}

func TestGenericResult(t *testing.T) {
	done := regexp.MustCompile(`>>> $`)
	for _, tc := range []struct{ text, prompt, want string }{
		{"print(1)\n1\n>>> ", "print(1)", "1"},
		{"1\n>>> ", "print(1)", "1"},
		// The echo of each input line is dropped (here with the REPL's
		// continuation prompt).
		{"for i in x:\n...     pass\n... \n>>> ", "for i in x:\n    pass\n", "..."},
		{"no prompt yet", "x", "no prompt yet"},
	} {
		if got := genericResult(tc.text, tc.prompt, done); got != tc.want {
			t.Errorf("genericResult(%q, %q) = %q, want %q", tc.text, tc.prompt, got, tc.want)
		}
	}
	if _, ok := matchEnd(done, ">>> x = 1"); ok {
		t.Errorf("the done pattern matched in the middle of the text")
	}
}

func TestPasted(t *testing.T) {
	got := string(pasted("a\r\nb\x1b[201~\x03c"))
	if got != "\x1b[200~a\nb\x03c\x1b[201~" {
		t.Errorf("pasted = %q: a prompt must not end the paste", got)
	}
}

func TestClaudeScreenText(t *testing.T) {
	screen := strings.Join([]string{
		"● earlier answer",
		"❯ /compact",
		"  ⎿  Compacted (ctrl+o to see full summary)",
		"  ⎿  Read hello.txt (2 lines)",
		"────────────",
		"❯",
		"────────────",
		"  ⏵⏵ bypass permissions on (shift+tab to cycle) · ← for agents",
	}, "\n")
	if got, want := claudeScreenText(screen, "/compact"), "Compacted (ctrl+o to see full summary)\nRead hello.txt (2 lines)"; got != want {
		t.Errorf("claudeScreenText = %q, want %q", got, want)
	}
}

// TestCommandPending: a slash command still in Claude Code's input box,
// over its completion menu, has not run; once run, the box is empty.
func TestCommandPending(t *testing.T) {
	menu := strings.Join([]string{
		"● earlier answer",
		"────────────",
		"❯ /exit",
		"────────────",
		"  /exit                         Exit the CLI",
		"  /context                      Visualize current context usage as a colored grid",
	}, "\n")
	ran := strings.Join([]string{
		"❯ /compact",
		"  ⎿  Compacted (ctrl+o to see full summary)",
		"────────────",
		"❯",
		"────────────",
		"  ⏵⏵ bypass permissions on (shift+tab to cycle) · ← for agents",
	}, "\n")
	for _, tc := range []struct {
		screen, prompt string
		want           bool
	}{
		{menu, "/exit", true},
		{menu, "/compact", false},
		{ran, "/compact", false},
		{"", "/exit", false},
	} {
		if got := commandPending(tc.screen, tc.prompt); got != tc.want {
			t.Errorf("commandPending(%q, %q) = %v, want %v", tc.screen, tc.prompt, got, tc.want)
		}
	}
}

// TestProjectDirName: where Claude Code 2.1.197 keeps a directory's
// transcripts (checked against the CLI for the short form: /tmp/exp/ws1 →
// -tmp-exp-ws1; the long form follows its code: cut at 200, then the
// base-36 absolute value of the Java-style string hash).
func TestProjectDirName(t *testing.T) {
	if got := projectDirName("/workspace/repo"); got != "-workspace-repo" {
		t.Errorf("projectDirName = %q", got)
	}
	if got := projectDirName("/tmp/exp/ws1"); got != "-tmp-exp-ws1" {
		t.Errorf("projectDirName = %q", got)
	}
	long := "/" + strings.Repeat("a", 250)
	var h int32
	for _, c := range long {
		h = h*31 + c
	}
	abs := int64(h)
	if abs < 0 {
		abs = -abs
	}
	if got, want := projectDirName(long), "-"+strings.Repeat("a", 199)+"-"+strconv.FormatInt(abs, 36); got != want {
		t.Errorf("long projectDirName = %q, want %q", got, want)
	}
}

// TestClaudeSettings: the caller's settings and hooks are kept, Harvest's
// hooks are added for every event it listens to, each writing to the hook
// directory with the nonce.
func TestClaudeSettings(t *testing.T) {
	extra := json.RawMessage(`{"model":"x","hooks":{"Stop":[{"hooks":[{"type":"command","command":"mine"}]}]}}`)
	b, err := claudeSettings(extra, "/h/dir", "n0nce")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Model string `json:"model"`
		Skip  bool   `json:"skipDangerousModePermissionPrompt"`
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct{ Type, Command string }
		}
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Model != "x" || !s.Skip {
		t.Errorf("settings %s", b)
	}
	if len(s.Hooks["Stop"]) != 2 || s.Hooks["Stop"][0].Hooks[0].Command != "mine" {
		t.Errorf("the caller's Stop hook was not kept: %s", b)
	}
	for _, ev := range hookEvents {
		g := s.Hooks[ev]
		if len(g) == 0 || !strings.Contains(g[len(g)-1].Hooks[0].Command, "n0nce "+ev+` "$f" >>'/h/dir/log'`) {
			t.Errorf("no Harvest hook for %s: %s", ev, b)
		}
	}
	if _, err := claudeSettings(json.RawMessage(`[1]`), "/h", "n"); err == nil {
		t.Errorf("settings that are not an object were accepted")
	}
}
