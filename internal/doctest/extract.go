package doctest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"
)

// Marker is the info string of a runnable block: "```sh test".
const Marker = "sh test"

// DefaultTimeout is a block's deadline unless its info string says
// timeout=D.
const DefaultTimeout = 3 * time.Minute

// A Block is one runnable fenced block of a markdown file.
type Block struct {
	File    string        // the file, as given to Extract
	Line    int           // the line of its opening fence, from 1
	Script  string        // its lines, the fence's indentation removed
	Timeout time.Duration // its deadline
}

// Where is the block's file:line, as failures name it.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Extract returns the runnable blocks of the markdown file path, in order.
// An info string that starts with the marker but says more than a
// timeout, or a block left open at the end of the file, is an error
// naming its line: a typo must not turn a block into one that is never
// run.
func Extract(path string) ([]Block, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse is Extract on the file's contents.
func Parse(path string, src []byte) ([]Block, error) {
	var (
		blocks []Block
		open   *Block // the runnable block being read
		inside bool   // inside any fenced block
		fence  string // its fence ("```" or longer, or ~~~)
		indent int    // its fence's indentation
		body   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if !inside {
			f := fenceOf(trimmed)
			if f == "" {
				continue
			}
			inside, fence, indent = true, f, len(line)-len(trimmed)
			info := strings.TrimSpace(trimmed[len(f):])
			ok, timeout, err := runnable(info)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, n, err)
			}
			if ok {
				open = &Block{File: path, Line: n, Timeout: timeout}
				body.Reset()
			}
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(trimmed[len(fence):]) == "" {
			if open != nil {
				open.Script = body.String()
				blocks = append(blocks, *open)
				open = nil
			}
			inside = false
			continue
		}
		if open != nil {
			// Remove the fence's indentation (a block inside a list item).
			cut := 0
			for cut < indent && cut < len(line) && (line[cut] == ' ' || line[cut] == '\t') {
				cut++
			}
			body.WriteString(line[cut:])
			body.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if open != nil {
		return nil, fmt.Errorf("%s:%d: the runnable block is never closed", path, open.Line)
	}
	return blocks, nil
}

// fenceOf returns the fence a line opens with (three or more backticks or
// tildes), or "".
func fenceOf(s string) string {
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(s) && s[n] == c {
			n++
		}
		if n >= 3 {
			return s[:n]
		}
	}
	return ""
}

// runnable reports whether an info string marks a runnable block, and its
// deadline.
func runnable(info string) (bool, time.Duration, error) {
	words := strings.Fields(info)
	if len(words) < 2 || words[0] != "sh" || words[1] != "test" {
		return false, 0, nil
	}
	timeout := DefaultTimeout
	for _, w := range words[2:] {
		v, ok := strings.CutPrefix(w, "timeout=")
		if !ok {
			return false, 0, fmt.Errorf("the runnable block's info string %q: %q is not timeout=DURATION (the only option)", info, w)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return false, 0, fmt.Errorf("the runnable block's info string %q: %q is no duration like 5m", info, v)
		}
		timeout = d
	}
	return true, timeout, nil
}
