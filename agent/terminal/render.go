package terminal

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// screen is a small terminal model: enough of a VT100/xterm to turn what a
// CLI prints into the text a person would see. It keeps a grid of
// character cells, the cursor, and the lines scrolled off the top, and
// applies printable text (with autowrap), CR, LF, BS, TAB, cursor motion
// (CUU/CUD/CUF/CUB/CNL/CPL/CHA/CUP/HVP/VPA, save/restore), erase in line and
// display, and insert/delete/erase of characters. Everything else —
// colours, modes, OSC titles, DCS strings — is parsed and dropped.
// Character widths are not modelled (a wide character takes one cell), nor
// scroll regions or the alternate screen: a full-screen program that uses
// them comes out approximately.
//
// Why not a full emulator (see the package doc): Claude Code's answer comes
// from its Stop hook, exactly; the screen is for line-oriented REPLs' done
// pattern and results, and for the few lines an error shows. Claude Code
// draws with relative cursor motion and erase-in-line, which this model
// follows, so those lines are the real screen.
type screen struct {
	rows, cols int
	lines      [][]rune // scrollback, then the screen: lines[top:top+rows]
	top        int
	row, col   int // cursor, row relative to top
	savedRow   int
	savedCol   int

	markLine, markCol int // where text since the mark starts (absolute)

	state   escState
	params  []byte
	partial []byte // an incomplete UTF-8 sequence
}

type escState uint8

const (
	stNormal    escState = iota
	stEsc                // after ESC
	stEscSkip            // ESC ( and friends: one more byte
	stCSI                // ESC [ ... final byte
	stString             // OSC, DCS, APC, PM, SOS: until BEL or ESC \
	stStringEsc          // ESC inside a string
)

// maxLines bounds the scrollback (up to a quarter more before a batch of
// the oldest lines goes).
const maxLines = 5000

func newScreen(rows, cols int) *screen {
	s := &screen{}
	s.resize(rows, cols)
	return s
}

func (s *screen) resize(rows, cols int) {
	s.rows, s.cols = max(rows, 1), max(cols, 2)
	s.row, s.col = min(s.row, s.rows-1), min(s.col, s.cols-1)
	s.fill()
}

// fill makes sure the screen's lines exist.
func (s *screen) fill() {
	for len(s.lines) < s.top+s.rows {
		s.lines = append(s.lines, nil)
	}
}

// mark makes text start at the cursor.
func (s *screen) mark() {
	s.markLine, s.markCol = s.top+s.row, s.col
}

func (s *screen) write(p []byte) {
	if len(s.partial) > 0 {
		p = append(s.partial, p...)
		s.partial = nil
	}
	for i := 0; i < len(p); {
		b := p[i]
		switch s.state {
		case stEsc:
			i++
			s.state = stNormal
			switch b {
			case '[':
				s.state, s.params = stCSI, s.params[:0]
			case ']', 'P', 'X', '^', '_':
				s.state = stString
			case '(', ')', '*', '+', '-', '.', '/', '#', '%', ' ':
				s.state = stEscSkip
			case '7':
				s.savedRow, s.savedCol = s.row, s.col
			case '8':
				s.row, s.col = s.savedRow, s.savedCol
			case 'D':
				s.lineFeed()
			case 'E':
				s.lineFeed()
				s.col = 0
			case 'M':
				s.row = max(s.row-1, 0)
			}
			continue
		case stEscSkip:
			i++
			s.state = stNormal
			continue
		case stCSI:
			i++
			if b >= 0x40 && b <= 0x7e {
				s.csi(b)
				s.state = stNormal
			} else if len(s.params) < 64 {
				s.params = append(s.params, b)
			}
			continue
		case stString:
			i++
			switch b {
			case 0x07:
				s.state = stNormal
			case 0x1b:
				s.state = stStringEsc
			}
			continue
		case stStringEsc:
			i++
			if b == '\\' {
				s.state = stNormal
			} else {
				s.state = stString
			}
			continue
		}
		switch {
		case b == 0x1b:
			s.state = stEsc
			i++
		case b == '\r':
			s.col = 0
			i++
		case b == '\n', b == 0x0b, b == 0x0c:
			s.lineFeed()
			i++
		case b == '\b':
			s.col = max(s.col-1, 0)
			i++
		case b == '\t':
			s.col = min((s.col/8+1)*8, s.cols-1)
			i++
		case b < 0x20 || b == 0x7f:
			i++ // bell, shift in/out, ...
		case b < utf8.RuneSelf:
			s.put(rune(b))
			i++
		default:
			if !utf8.FullRune(p[i:]) {
				s.partial = append([]byte(nil), p[i:]...)
				return
			}
			c, n := utf8.DecodeRune(p[i:])
			s.put(c)
			i += n
		}
	}
}

// line returns the cursor's line.
func (s *screen) line() *[]rune { return &s.lines[s.top+s.row] }

func (s *screen) put(c rune) {
	if s.col >= s.cols { // autowrap
		s.col = 0
		s.lineFeed()
	}
	l := s.line()
	for len(*l) <= s.col {
		*l = append(*l, ' ')
	}
	(*l)[s.col] = c
	s.col++
}

func (s *screen) lineFeed() {
	if s.row < s.rows-1 {
		s.row++
		return
	}
	s.top++
	s.fill()
	// Drop the oldest lines in batches, so that a flood of output costs
	// amortised constant time per line.
	if drop := len(s.lines) - maxLines; drop > maxLines/4 && drop <= s.top {
		s.lines = append(s.lines[:0:0], s.lines[drop:]...)
		s.top -= drop
		s.markLine = max(s.markLine-drop, 0)
		if s.markLine == 0 {
			s.markCol = 0
		}
	}
}

// param returns the i-th numeric parameter, or def when it is missing or 0.
func (s *screen) param(i, def int) int {
	f := strings.Split(string(s.params), ";")
	if i >= len(f) {
		return def
	}
	n, err := strconv.Atoi(strings.TrimLeft(f[i], "?>= "))
	if err != nil || n == 0 {
		return def
	}
	return min(n, 10000)
}

func (s *screen) csi(final byte) {
	if len(s.params) > 0 && (s.params[0] == '?' || s.params[0] == '>' || s.params[0] == '=') {
		return // private modes (cursor visibility, bracketed paste, ...)
	}
	n := s.param(0, 1)
	switch final {
	case 'A':
		s.row = max(s.row-n, 0)
	case 'B', 'e':
		s.row = min(s.row+n, s.rows-1)
	case 'C', 'a':
		s.col = min(s.col+n, s.cols-1)
	case 'D':
		s.col = max(min(s.col, s.cols-1)-n, 0)
	case 'E':
		s.row, s.col = min(s.row+n, s.rows-1), 0
	case 'F':
		s.row, s.col = max(s.row-n, 0), 0
	case 'G', '`':
		s.col = min(n, s.cols) - 1
	case 'd':
		s.row = min(n, s.rows) - 1
	case 'H', 'f':
		s.row, s.col = min(n, s.rows)-1, min(s.param(1, 1), s.cols)-1
	case 's':
		s.savedRow, s.savedCol = s.row, s.col
	case 'u':
		s.row, s.col = s.savedRow, s.savedCol
	case 'K':
		l := s.line()
		switch s.param(0, 0) {
		case 0:
			if s.col < len(*l) {
				*l = (*l)[:s.col]
			}
		case 1:
			for i := 0; i <= s.col && i < len(*l); i++ {
				(*l)[i] = ' '
			}
		case 2:
			*l = (*l)[:0]
		}
	case 'J':
		switch s.param(0, 0) {
		case 0:
			l := s.line()
			if s.col < len(*l) {
				*l = (*l)[:s.col]
			}
			for r := s.row + 1; r < s.rows; r++ {
				s.lines[s.top+r] = nil
			}
		case 1:
			for r := 0; r < s.row; r++ {
				s.lines[s.top+r] = nil
			}
			l := s.line()
			for i := 0; i <= s.col && i < len(*l); i++ {
				(*l)[i] = ' '
			}
		default:
			for r := 0; r < s.rows; r++ {
				s.lines[s.top+r] = nil
			}
		}
	case 'P': // delete characters
		l := s.line()
		if s.col < len(*l) {
			*l = append((*l)[:s.col], (*l)[min(s.col+n, len(*l)):]...)
		}
	case 'X': // erase characters
		l := s.line()
		for i := s.col; i < s.col+n && i < len(*l); i++ {
			(*l)[i] = ' '
		}
	case '@': // insert blanks
		l := s.line()
		if s.col < len(*l) {
			blanks := []rune(strings.Repeat(" ", n))
			*l = append((*l)[:s.col], append(blanks, (*l)[s.col:]...)...)
			if len(*l) > s.cols {
				*l = (*l)[:s.cols]
			}
		}
	}
}

// text is what was printed since the mark: the lines from the mark's
// position to the last one written, each without trailing blanks except up
// to the cursor on its line (so a prompt like "$ " keeps its space),
// joined by "\n". With n > 0, only the last n of those lines.
func (s *screen) text(n int) string {
	end, cur := s.lastLine(), s.top+s.row
	first := s.markLine
	if n > 0 {
		first = max(first, end-n+1)
	}
	var b strings.Builder
	for i := first; i <= end && i < len(s.lines); i++ {
		l := s.lines[i]
		start := 0
		if i == s.markLine {
			start = min(s.markCol, len(l))
		}
		str := strings.TrimRight(string(l[start:]), " ")
		if n := utf8.RuneCountInString(str); i == cur && s.col-start > n {
			str += strings.Repeat(" ", s.col-start-n)
		}
		if i > first {
			b.WriteByte('\n')
		}
		b.WriteString(str)
	}
	return b.String()
}

// lastLine is the index of the last line with anything on it, or the
// cursor's, whichever is further down.
func (s *screen) lastLine() int {
	end := s.top + s.row
	for i := len(s.lines) - 1; i > end; i-- {
		if strings.TrimSpace(string(s.lines[i])) != "" {
			return i
		}
	}
	return end
}

// tail returns the last n non-blank lines, for error messages.
func (s *screen) tail(n int) string {
	var out []string
	for i := s.lastLine(); i >= 0 && len(out) < n; i-- {
		if l := strings.TrimSpace(string(s.lines[i])); l != "" {
			out = append(out, strings.TrimRight(string(s.lines[i]), " "))
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return strings.Join(out, "\n")
}
