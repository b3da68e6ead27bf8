package ghbot

import (
	"regexp"
	"sort"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// Reading a comment as a person reads it. A comment calls Harvest when
// its handle is written where GitHub would render it as a mention: in the
// text, not in an inline code span, a fenced or indented code block, a
// block quote (someone quoting an earlier request), or HTML (a comment
// <!-- like this --> is not shown at all). The comment is parsed as
// GitHub-flavoured Markdown (CommonMark with GitHub's extensions, by
// goldmark) rather than searched with a pattern, so what counts is what
// a reader sees.
//
// The task sent to the agent is the comment as written, with the one
// mention taken out (at its place in the source): code blocks and quotes
// stay, as they are often what the request is about.

var md = goldmark.New(goldmark.WithExtensions(extension.GFM))

// visibleText is a text span of the source that a reader sees as text.
type visibleText struct{ start, stop int }

// visibleSpans lists the text spans of body a reader sees as prose, in
// source order.
func visibleSpans(body []byte) []visibleText {
	doc := md.Parser().Parse(text.NewReader(body))
	var spans []visibleText
	ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n.Kind() {
		case ast.KindCodeSpan, ast.KindFencedCodeBlock, ast.KindCodeBlock, ast.KindBlockquote,
			ast.KindHTMLBlock, ast.KindRawHTML, ast.KindAutoLink:
			return ast.WalkSkipChildren, nil
		case ast.KindText:
			seg := n.(*ast.Text).Segment
			spans = append(spans, visibleText{seg.Start, seg.Stop})
		case ast.KindString:
			// Made by the parser (not a span of the source): no mention.
		}
		return ast.WalkContinue, nil
	})
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	return spans
}

// mentionAt finds the first mention of handle ("@name", any case) that a
// reader sees in body, and returns its byte offsets in body.
func mentionAt(body, handle string) (start, stop int, ok bool) {
	re := mentionPattern(handle)
	b := []byte(body)
	spans := visibleSpans(b)
	// Adjacent spans (the parser splits text at some punctuation) are
	// read together, so a handle split across two is still found.
	for i := 0; i < len(spans); {
		j := i + 1
		for j < len(spans) && spans[j].start == spans[j-1].stop {
			j++
		}
		from, to := spans[i].start, spans[j-1].stop
		seg := body[from:to]
		for _, m := range re.FindAllStringIndex(seg, -1) {
			s, e := from+m[0], from+m[1]
			if s > 0 && isHandleChar(body[s-1]) {
				continue // part of a longer word or an email address
			}
			return s, e, true
		}
		i = j
	}
	return 0, 0, false
}

// mentionPattern matches "@handle" not followed by a character that would
// make it another login ("@harvest-dev" is not "@harvest").
func mentionPattern(handle string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)` + regexp.QuoteMeta(handle) + `(?:$|[^A-Za-z0-9_-]|-$|-[^A-Za-z0-9])`)
}

func isHandleChar(c byte) bool {
	return c == '@' || c == '/' || c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// readMention says whether body calls Harvest (handle, like "@harvest")
// as a person reads it, and returns the request: body without that
// mention.
func readMention(body, handle string) (string, bool) {
	s, e, ok := mentionAt(body, handle)
	if !ok {
		return "", false
	}
	// The match may have taken the character after the handle.
	e = s + len(handle)
	return strings.TrimSpace(body[:s] + body[e:]), true
}

// Commands a person gives Harvest in a comment ("@harvest stop"): the
// whole request is the command's word.
const (
	cmdStop   = "stop"
	cmdStatus = "status"
	cmdHelp   = "help"
)

// command is the command a request is ("" : a task for the agent).
func command(request string) string {
	w := strings.ToLower(strings.Trim(strings.TrimSpace(request), ".!?:;, \t\n"))
	switch w {
	case cmdStop, cmdStatus, cmdHelp:
		return w
	}
	return ""
}
