package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// The config file of harvest serve (--config FILE, or $HARVEST_CONFIG)
//
// It is written over serve's flag set, not over a struct of its own, so
// every flag is a setting with no code of its own, today's and any added
// later: a key is a flag's long name (listen, disk, repo-root), with the
// same value the flag takes, and nothing else is a key. There is no nesting
// (github: {app-id: …}): one name per setting, the same in the file, on the
// command line and in --help. By the flag's type:
//
//	a bool flag          true or false (a YAML boolean, not "yes")
//	a repeatable flag    a list (repo-root: [/srv/a, /srv/b]); one value
//	                     alone may be written without the brackets
//	a NAME=VALUE flag    a mapping (egress-internal: {pypi: 10.0.0.5:443}),
//	                     or a list of NAME=VALUE strings
//	any other            one value, as on the command line (disk: 20g,
//	                     pool: 4, shutdown-grace: 1m)
//
// Precedence: the command line, then the file, then the environment
// variable a flag falls back to when unset ($HARVEST_HOME, $HARVEST_STORE,
// $HARVEST_MODEL), then the default. A flag given on the command line
// replaces the file's value, lists included (they are not merged).
//
// An unknown key, a key given twice, a value of the wrong shape or one the
// flag refuses is an error naming the file and the line ("FILE:LINE: …"),
// and serve does not start. A value checked later, when serve starts (a
// --pool below 0, a --store that is not a PostgreSQL URL), is refused with
// the flag's name as before, and the error says where in the file it was
// set (explain).
//
// --print-config prints the effective configuration as such a file, every
// key with its help as a comment, and exits: feed it back with --config.
// Secrets are never printed (redact): credentials in URLs (a --store or
// --nats password), secret query parameters, and the whole value of a flag
// annotated as a secret (configSecret). Serve's GitHub secrets are files
// (--github-app-key, --github-token-file, --github-webhook-secret-file):
// their paths are shown, never their contents.

// configAnnotation annotates a flag (pflag annotations) with what the
// config file must know of it: one of the values below.
const configAnnotation = "harvest-config"

const (
	// configSecret: the value is a secret; --print-config never shows it.
	configSecret = "secret"
	// configSecretFile: the value is the path of a file that holds a
	// secret; the path is shown.
	configSecretFile = "secret-file"
	// configKeyValue: a repeatable NAME=VALUE flag, a mapping in the file.
	configKeyValue = "key-value"
)

// envAnnotation names the environment variable a flag falls back to when
// neither the command line nor the file sets it.
const envAnnotation = "harvest-env"

// notSettings are the flags of serve that are not settings: where the
// settings are, and what to do with them.
var notSettings = map[string]bool{"config": true, "print-config": true, "help": true}

// configEnv names the config file when --config is not given.
const configEnv = "HARVEST_CONFIG"

func annotate(fl *pflag.FlagSet, name, key, value string) {
	if err := fl.SetAnnotation(name, key, []string{value}); err != nil {
		panic(err) // a flag named in code that does not exist
	}
}

func annotation(f *pflag.Flag, key string) string {
	if v := f.Annotations[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// serveConfig is what a config file set.
type serveConfig struct {
	path string
	// lines: the line of each flag the file set (and the command line did
	// not).
	lines map[string]int
	// overridden: keys of the file the command line set again.
	overridden map[string]int
}

// configError is an error at a line of the config file.
type configError struct {
	path string
	line int
	msg  string
}

func (e *configError) Error() string {
	if e.line <= 0 {
		return fmt.Sprintf("%s: %s", e.path, e.msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.path, e.line, e.msg)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// loadServeConfig reads the config file at path and sets, on fl, each
// flag it names that the command line did not.
func loadServeConfig(fl *pflag.FlagSet, path string) (*serveConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the config file: %w", err)
	}
	c := &serveConfig{path: path, lines: map[string]int{}, overridden: map[string]int{}}
	errAt := func(n *yaml.Node, format string, args ...any) error {
		return &configError{path: path, line: n.Line, msg: fmt.Sprintf(format, args...)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil // empty: nothing set
		}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			return nil, &configError{path: path, line: syntaxLine(data, m), msg: "YAML syntax: " + m[2]}
		}
		return nil, &configError{path: path, msg: "YAML syntax: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, &configError{path: path, line: more.Line, msg: "a second YAML document: a config file is one mapping of settings"}
	}
	if len(doc.Content) == 0 {
		return c, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return c, nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return nil, errAt(root, "the file must be a mapping of settings, like\n  listen: 127.0.0.1:7777\n  disk: 20g\n(every key is a flag of harvest serve, without its --)")
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, errAt(k, "a key must be a flag's name, like listen")
		}
		name := k.Value
		f := fl.Lookup(name)
		if f == nil || notSettings[name] {
			return nil, errAt(k, "unknown key %q: %s", name, unknownKeyHint(fl, name))
		}
		if first, dup := seen[name]; dup {
			return nil, errAt(k, "%s is set twice (first at line %d)", name, first)
		}
		seen[name] = k.Line
		if f.Changed { // the command line wins
			c.overridden[name] = k.Line
			if err := checkShape(f, v, errAt); err != nil {
				return nil, err
			}
			continue
		}
		if err := setFromNode(f, v, errAt); err != nil {
			return nil, err
		}
		c.lines[name] = k.Line
	}
	return c, nil
}

// syntaxLine is the line of a YAML syntax error m (yamlLine's match).
// yaml.v3 names the line where the enclosing block starts (for an
// unclosed "[" the key's, or the top of the file); the line that broke is
// the first one whose prefix of the file fails with the same reason.
func syntaxLine(data []byte, m []string) int {
	line, _ := strconv.Atoi(m[1])
	lines := bytes.SplitAfter(data, []byte("\n"))
	for k := 1; k <= len(lines); k++ {
		var n yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n)
		if pm := yamlLine.FindStringSubmatch(fmt.Sprint(err)); pm != nil && pm[2] == m[2] {
			return k
		}
	}
	return line
}

// unknownKeyHint says what an unknown key could have been.
func unknownKeyHint(fl *pflag.FlagSet, name string) string {
	if notSettings[name] {
		return fmt.Sprintf("--%s is not a setting", name)
	}
	bare := strings.TrimLeft(name, "-")
	if bare != name && fl.Lookup(bare) != nil && !notSettings[bare] {
		return fmt.Sprintf("write it without the dashes: %s", bare)
	}
	best, bestD := "", 4
	fl.VisitAll(func(f *pflag.Flag) {
		if notSettings[f.Name] {
			return
		}
		if d := editDistance(bare, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best != "" {
		return fmt.Sprintf("did you mean %s? (keys are the flags of harvest serve --help, without their --)", best)
	}
	return "harvest serve has no such flag (keys are the flags of harvest serve --help, without their --)"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

type errAtFunc func(n *yaml.Node, format string, args ...any) error

// isList: the flag takes several values (a repeatable flag).
func isList(f *pflag.Flag) bool {
	_, ok := f.Value.(pflag.SliceValue)
	return ok
}

// items are the values node gives flag f, checked for shape.
func items(f *pflag.Flag, n *yaml.Node, errAt errAtFunc) ([]string, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, errAt(n, "%s has no value: give one, or remove the key", f.Name)
	}
	kv := annotation(f, configAnnotation) == configKeyValue
	if !isList(f) {
		switch {
		case n.Kind != yaml.ScalarNode:
			return nil, errAt(n, "%s takes one value, like %s: %s", f.Name, f.Name, example(f))
		case f.Value.Type() == "bool" && n.Tag != "!!bool":
			return nil, errAt(n, "%s takes true or false, not %q", f.Name, n.Value)
		}
		return []string{n.Value}, nil
	}
	var out []string
	switch n.Kind {
	case yaml.ScalarNode:
		out = []string{n.Value}
	case yaml.SequenceNode:
		for _, it := range n.Content {
			if it.Kind == yaml.AliasNode {
				it = it.Alias
			}
			if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
				return nil, errAt(it, "%s takes a list of values, each one like %s", f.Name, example(f))
			}
			out = append(out, it.Value)
		}
	case yaml.MappingNode:
		if !kv {
			return nil, errAt(n, "%s takes a list, like %s: [%s], not a mapping", f.Name, f.Name, example(f))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
				return nil, errAt(k, "%s takes a mapping of NAME: VALUE, like %s", f.Name, example(f))
			}
			out = append(out, k.Value+"="+v.Value)
		}
	default:
		return nil, errAt(n, "%s takes a list", f.Name)
	}
	return out, nil
}

// example is an example of a value of f, for an error message.
func example(f *pflag.Flag) string {
	switch {
	case annotation(f, configAnnotation) == configKeyValue:
		return "{NAME: VALUE}"
	case f.Value.Type() == "bool":
		return "true"
	case f.DefValue != "" && f.DefValue != "[]":
		return f.DefValue
	}
	return "VALUE"
}

// checkShape checks a value the command line overrides: a mistake in the
// file is one whatever the command line says.
func checkShape(f *pflag.Flag, n *yaml.Node, errAt errAtFunc) error {
	_, err := items(f, n, errAt)
	return err
}

// setFromNode sets flag f to the file's value n.
func setFromNode(f *pflag.Flag, n *yaml.Node, errAt errAtFunc) error {
	vals, err := items(f, n, errAt)
	if err != nil {
		return err
	}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		// Each value is checked as the flag would check it alone.
		for _, v := range vals {
			if strings.ContainsRune(v, '\n') {
				return errAt(n, "%s: %q: one line per value", f.Name, v)
			}
		}
		if err := sv.Replace(vals); err != nil {
			return errAt(n, "%s: %v", f.Name, err)
		}
		return nil
	}
	if err := f.Value.Set(vals[0]); err != nil {
		return errAt(n, "%s: %q: %v", f.Name, vals[0], err)
	}
	return nil
}

// explain adds to an error that names a flag the file set where the file
// set it, so that a value refused when serve starts is found in the file.
func (c *serveConfig) explain(err error) error {
	if c == nil || err == nil || len(c.lines) == 0 {
		return err
	}
	msg := err.Error()
	var where []string
	names := make([]string, 0, len(c.lines))
	for name := range c.lines {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if mentionsFlag(msg, name) {
			where = append(where, fmt.Sprintf("--%s is set at %s:%d", name, c.path, c.lines[name]))
		}
	}
	if len(where) == 0 {
		return err
	}
	more := " (" + strings.Join(where, "; ") + ")"
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err == nil {
			return err
		}
		return exitCode(ee.code, fmt.Errorf("%w%s", ee.err, more))
	}
	return fmt.Errorf("%w%s", err, more)
}

// mentionsFlag: msg names --name, as a whole flag (not --name-other).
func mentionsFlag(msg, name string) bool {
	flag := "--" + name
	for i := 0; ; {
		j := strings.Index(msg[i:], flag)
		if j < 0 {
			return false
		}
		end := i + j + len(flag)
		if end == len(msg) || !isFlagChar(msg[end]) {
			return true
		}
		i = end
	}
}

func isFlagChar(b byte) bool {
	return b == '-' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9'
}

// configPath is the config file named by --config, else $HARVEST_CONFIG,
// else "" (none).
func configPath(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(configEnv)
}

// applyServeConfig loads the config file, if one is named, onto serve's
// flags.
func applyServeConfig(fl *pflag.FlagSet, path string) (*serveConfig, error) {
	if path == "" {
		return nil, nil
	}
	c, err := loadServeConfig(fl, path)
	if err != nil {
		return nil, exitCode(2, err)
	}
	return c, nil
}

// printServeConfig writes the effective configuration of fl as a config
// file: every setting, its help as a comment, and where its value comes
// from when not the default. Secrets are redacted.
func printServeConfig(w io.Writer, fl *pflag.FlagSet, c *serveConfig) error {
	doc := &yaml.Node{Kind: yaml.DocumentNode}
	root := &yaml.Node{Kind: yaml.MappingNode}
	doc.Content = []*yaml.Node{root}
	file := ""
	if c != nil {
		file = c.path + ", then "
	}
	doc.HeadComment = wrapComment("harvest serve --print-config: the effective configuration: the command line, then "+file+
		"the environment, then the defaults. Use it as a config file: harvest serve --config FILE. Secrets are not shown: "+
		"credentials in URLs are replaced by REDACTED, and a secret setting has no value (the server refuses it "+
		"until you give one); put them back, or give them another way (a PostgreSQL password: $PGPASSWORD or ~/.pgpass).", 76)
	fl.VisitAll(func(f *pflag.Flag) {
		if notSettings[f.Name] {
			return
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.Name, HeadComment: wrapComment(f.Usage, 76)}
		source := ""
		switch {
		case f.Changed:
			source = "the command line"
		case c != nil && c.lines[f.Name] > 0:
			source = fmt.Sprintf("%s:%d", c.path, c.lines[f.Name])
		}
		var v *yaml.Node
		env := annotation(f, envAnnotation)
		if source == "" && env != "" && os.Getenv(env) != "" {
			v = scalarNode(f, os.Getenv(env))
			source = "$" + env
		} else {
			v = valueNode(f)
		}
		redacted := redactNode(v)
		if annotation(f, configAnnotation) == configSecret && !isEmptyNode(v) {
			// No value: fed back, the file is refused at this line until
			// the secret is given, never run with a placeholder.
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", LineComment: "a secret, not shown: give it, or remove the key"}
			if source != "" {
				v.LineComment = "from " + source + "; " + v.LineComment
			}
			root.Content = append(root.Content, k, v)
			return
		}
		var notes []string
		if source != "" {
			notes = append(notes, "from "+source)
		}
		if redacted {
			notes = append(notes, "credentials redacted")
		}
		if len(notes) > 0 {
			// yaml.v3 writes a block collection's line comment after its
			// first entry, and a flow one's after the next key: on the key.
			if v.Kind != yaml.ScalarNode && v.Style != yaml.FlowStyle {
				k.LineComment = strings.Join(notes, "; ")
			} else {
				v.LineComment = strings.Join(notes, "; ")
			}
		}
		root.Content = append(root.Content, k, v)
	})
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

// valueNode is flag f's current value as YAML.
func valueNode(f *pflag.Flag) *yaml.Node {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		vals := sv.GetSlice()
		if annotation(f, configAnnotation) == configKeyValue {
			m := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
			ok := true
			for _, kv := range vals {
				k, v, found := strings.Cut(kv, "=")
				if !found {
					ok = false
					break
				}
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
			}
			if ok {
				if len(vals) > 0 {
					m.Style = 0
				}
				return m
			}
		}
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		if len(vals) == 0 {
			seq.Style = yaml.FlowStyle // []
		}
		for _, v := range vals {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
		}
		return seq
	}
	return scalarNode(f, f.Value.String())
}

// scalarNode is s as a value of flag f's type.
func scalarNode(f *pflag.Flag, s string) *yaml.Node {
	tag := "!!str"
	switch f.Value.Type() {
	case "bool":
		tag = "!!bool"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		tag = "!!int"
	case "float32", "float64":
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}
}

func isEmptyNode(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value == ""
	default:
		return len(n.Content) == 0
	}
}

// redactNode redacts every string in n (redact), reporting whether any
// changed.
func redactNode(n *yaml.Node) bool {
	changed := false
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if r := redact(n.Value); r != n.Value {
			n.Value, changed = r, true
		}
	}
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 {
			continue // a key (a name)
		}
		if redactNode(c) {
			changed = true
		}
	}
	return changed
}

// redacted replaces a secret.
const redacted = "REDACTED"

// secretParam matches the names of query parameters and key=value pairs
// that hold secrets.
var secretParam = regexp.MustCompile(`(?i)(pass|secret|token|key|auth|cred|signature|sig$)`)

// secretPair matches NAME=VALUE pairs of secrets outside URLs (a
// PostgreSQL keyword DSN's password=...).
var secretPair = regexp.MustCompile(`(?i)\b([a-z_]*(?:password|passwd|pwd|secret|token)[a-z_]*)=('[^']*'|[^\s&]+)`)

// redact removes credentials from s: a URL's password (and its user too
// when the user alone is the credential: every scheme but PostgreSQL's,
// like a NATS token), the values of its secret query parameters, and
// secret NAME=VALUE pairs.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		changed := false
		if u.User != nil {
			_, hasPass := u.User.Password()
			switch {
			case hasPass:
				u.User = url.UserPassword(u.User.Username(), redacted)
			case u.Scheme == "postgres" || u.Scheme == "postgresql":
			default:
				u.User = url.User(redacted)
			}
			changed = true
		}
		if u.RawQuery != "" {
			q := u.Query()
			for k := range q {
				if secretParam.MatchString(k) {
					q[k] = []string{redacted}
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
		}
		if changed {
			s = u.String()
		}
	}
	return secretPair.ReplaceAllString(s, "${1}="+redacted)
}

// wrapComment wraps text into lines of at most width (a YAML comment).
func wrapComment(text string, width int) string {
	var lines []string
	for _, para := range strings.Split(text, "\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > width {
				lines = append(lines, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
