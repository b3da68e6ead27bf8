package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// loadError is an error at a line of a script: "NAME:LINE: reason".
type loadError struct {
	file string
	line int
	msg  string
}

func (e *loadError) Error() string {
	if e.line <= 0 {
		return fmt.Sprintf("%s: %s", e.file, e.msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg)
}

// decoder walks yaml.Nodes with the file name at hand, so every error says
// where it is. Scripts are parsed node by node rather than with
// yaml.Decoder.KnownFields because the errors must name the file, the line and
// what to write instead.
type decoder struct{ file string }

func (d *decoder) errf(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &loadError{file: d.file, line: line, msg: fmt.Sprintf(format, args...)}
}

// yamlSyntaxLine pulls the line out of yaml.v3's "yaml: line N: reason".
var yamlSyntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML syntax error into "file:line: reason". yaml.v3
// reports the line where the enclosing block starts, which for a badly
// indented key can be the top of the file; the line that broke is the first
// one whose prefix of the file fails with the same reason.
func (d *decoder) syntaxError(data []byte, err error) error {
	msg := err.Error()
	m := yamlSyntaxLine.FindStringSubmatch(msg)
	if m == nil {
		return &loadError{file: d.file, msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	line, _ := strconv.Atoi(m[1])
	reason := m[2]
	lines := bytes.SplitAfter(data, []byte("\n"))
	for k := 1; k <= len(lines); k++ {
		var n yaml.Node
		perr := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n)
		if pm := yamlSyntaxLine.FindStringSubmatch(fmt.Sprint(perr)); pm != nil && pm[2] == reason {
			line = k
			break
		}
	}
	return &loadError{file: d.file, line: line, msg: "YAML syntax: " + reason}
}

// field is one key: value pair of a mapping.
type field struct {
	key   string
	kNode *yaml.Node
	value *yaml.Node
}

// mapping returns the pairs of a mapping node in order, refusing keys not in
// known (and duplicates), so a typo like "tool_call:" is an error, not a
// silently ignored line.
func (d *decoder) mapping(n *yaml.Node, what string, known ...string) ([]field, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, d.errf(n, "%s must be a mapping (key: value lines), not %s", what, kindName(n))
	}
	seen := map[string]bool{}
	var out []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return nil, d.errf(k, "%s: keys must be plain words", what)
		}
		if !contains(known, k.Value) {
			return nil, d.errf(k, "unknown field %q in %s (known: %s)", k.Value, what, strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return nil, d.errf(k, "field %q appears twice in %s", k.Value, what)
		}
		seen[k.Value] = true
		out = append(out, field{key: k.Value, kNode: k, value: v})
	}
	return out, nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return n
		}
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "this"
}

func (d *decoder) str(f field) (string, error) {
	n := f.value
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return "", d.errf(n, "%s must be a string, not %s", f.key, kindName(n))
	}
	return n.Value, nil
}

func (d *decoder) integer(f field, min int) (int, error) {
	n := f.value
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, d.errf(n, "%s must be a whole number, not %s", f.key, kindName(n))
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil || v > math.MaxInt32 {
		return 0, d.errf(n, "%s: %q is not a whole number we can use", f.key, n.Value)
	}
	if int(v) < min {
		return 0, d.errf(n, "%s must be at least %d, not %d", f.key, min, v)
	}
	return int(v), nil
}

func (d *decoder) duration(f field) (time.Duration, error) {
	n := f.value
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return 0, d.errf(n, "%s must be a duration like 50ms or 2s, not %s", f.key, kindName(n))
	}
	if n.Value == "0" {
		return 0, nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, d.errf(n, "%s: %q is not a duration: write it like 50ms, 1.5s or 2m", f.key, n.Value)
	}
	if v < 0 {
		return 0, d.errf(n, "%s must not be negative (%s)", f.key, n.Value)
	}
	return v, nil
}

func (d *decoder) strings(f field) ([]string, error) {
	n := f.value
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		return []string{n.Value}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errf(n, "%s must be a list of strings, like [Write, Bash]", f.key)
	}
	var out []string
	for _, c := range n.Content {
		c = resolve(c)
		if c.Kind != yaml.ScalarNode || c.ShortTag() == "!!null" {
			return nil, d.errf(c, "%s: every item must be a string, not %s", f.key, kindName(c))
		}
		out = append(out, c.Value)
	}
	return out, nil
}

func (d *decoder) glob(f field) (string, error) {
	s, err := d.str(f)
	if err != nil {
		return "", err
	}
	if _, err := path.Match(s, ""); err != nil {
		return "", d.errf(f.value, "%s: bad glob %q (use * for any run of characters, ? for one, [a-z] for a set)", f.key, s)
	}
	return s, nil
}

// toJSON converts a YAML value to JSON, keeping the order of mapping keys (so
// a tool call's arguments stream in the order the script author wrote them).
func (d *decoder) toJSON(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	if err := d.writeJSON(&buf, n, 0); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (d *decoder) writeJSON(buf *bytes.Buffer, n *yaml.Node, depth int) error {
	if depth > 64 {
		return d.errf(n, "nested too deeply")
	}
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode {
				return d.errf(k, "JSON object keys must be strings")
			}
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k.Value)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := d.writeJSON(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := d.writeJSON(buf, c, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			buf.WriteString("null")
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return d.errf(n, "bad boolean %q", n.Value)
			}
			buf.WriteString(strconv.FormatBool(b))
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return d.errf(n, "number %q cannot be written as JSON", n.Value)
			}
			if n.ShortTag() == "!!int" {
				var i int64
				if err := n.Decode(&i); err == nil {
					buf.WriteString(strconv.FormatInt(i, 10))
					return nil
				}
			}
			buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		default:
			b, _ := json.Marshal(n.Value)
			buf.Write(b)
		}
	default:
		return d.errf(n, "cannot be written as JSON")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
