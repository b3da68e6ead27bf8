package tools

import (
	"bytes"
	"context"
	"fmt"
	"strings"
)

type editInput struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

var editTool = &builtin[editInput]{
	name: "edit",
	description: `Replace exact text in a file. old_string must match the file exactly, whitespace and indentation included (copy it from read's output without the line-number prefix), and must occur exactly once unless replace_all is true; include enough surrounding lines to make it unique.
When old_string is not found, the result shows the most similar lines in the file so you can correct it.
To create a file or replace all of it, use write.`,
	schema: schema(
		field{name: "path", typ: "string", required: true, desc: "The file to edit: absolute (under the workspace) or relative to the working directory."},
		field{name: "old_string", typ: "string", required: true, desc: "The exact text to replace."},
		field{name: "new_string", typ: "string", required: true, desc: "The text to replace it with (may be empty to delete)."},
		field{name: "replace_all", typ: "boolean", desc: "Replace every occurrence instead of requiring exactly one. Default false."},
	),
	run: runEdit,
}

func (in *editInput) validate(*Env) string {
	switch {
	case in.OldString == "":
		return "old_string is empty; give the exact text to replace (to create a file, use write)"
	case in.OldString == in.NewString:
		return "old_string and new_string are identical; there is nothing to change"
	}
	return ""
}

// editContext is how many unchanged lines around an edit the result shows.
const editContext = 3

func runEdit(ctx context.Context, env *Env, in *editInput) Result {
	p, denied := env.resolve(ctx, in.Path, accessWrite)
	if denied != nil {
		return *denied
	}
	fi, res := statExisting(ctx, env, p, in.Path)
	if res != nil {
		res.Output += " (edit changes existing files; to create one, use write.)"
		return *res
	}
	if fi.IsDir() {
		return errorf("%s is a directory; edit changes files.", p)
	}
	if !fi.Mode.IsRegular() {
		return errorf("%s is not a regular file (%s).", p, fi.Mode.Type())
	}
	if fi.Size > env.Limits().MaxFileBytes {
		return errorf("%s is %d bytes, over the %d byte limit for edit. Change it with a command instead (bash: sed, or a script).", p, fi.Size, env.Limits().MaxFileBytes)
	}
	data, err := env.sb.ReadFile(ctx, p)
	if err != nil {
		return fileError(ctx, "reading", p, err)
	}
	if bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
		return errorf("%s is a binary file; edit only changes text.", p)
	}
	text := string(data)
	oldS, newS := in.OldString, in.NewString
	count := strings.Count(text, oldS)
	if count == 0 && strings.Contains(text, "\r\n") && strings.Contains(oldS, "\n") && !strings.Contains(oldS, "\r\n") {
		// The file has CRLF line endings, which read does not show.
		oldS = strings.ReplaceAll(oldS, "\n", "\r\n")
		newS = strings.ReplaceAll(newS, "\n", "\r\n")
		count = strings.Count(text, oldS)
	}
	if count == 0 {
		return errorf("%s", noMatchMessage(p, text, in.OldString))
	}
	if count > 1 && !in.ReplaceAll {
		lines := occurrenceLines(text, oldS, 20)
		more := ""
		if count > len(lines) {
			more = ", ..."
		}
		return errorf("old_string occurs %d times in %s (starting at lines %s%s). Include more of the surrounding lines in old_string so that it matches exactly once, or set replace_all to true to replace every occurrence.",
			count, p, joinInts(lines), more)
	}
	firstLine := occurrenceLines(text, oldS, 1)[0]
	var updated string
	if in.ReplaceAll {
		updated = strings.ReplaceAll(text, oldS, newS)
	} else {
		updated = strings.Replace(text, oldS, newS, 1)
	}
	if int64(len(updated)) > env.Limits().MaxFileBytes {
		return errorf("the edit would make %s %d bytes, over the %d byte limit.", p, len(updated), env.Limits().MaxFileBytes)
	}
	if err := env.sb.WriteFile(ctx, p, []byte(updated), fi.Mode.Perm()); err != nil {
		return fileError(ctx, "writing", p, err)
	}
	if after, err := env.sb.Stat(ctx, p); err == nil {
		env.remember(p, after)
	}
	var b strings.Builder
	if in.ReplaceAll {
		fmt.Fprintf(&b, "Edited %s: replaced %d occurrence(s).", p, count)
		if count > 1 {
			return Result{Output: b.String(), Paths: []string{p}}
		}
	} else {
		fmt.Fprintf(&b, "Edited %s: replaced 1 occurrence.", p)
	}
	// Show the changed region as it is now.
	newLines := strings.Count(newS, "\n") + 1
	all := strings.Split(strings.TrimSuffix(updated, "\n"), "\n")
	from := max(firstLine-editContext, 1)
	to := min(firstLine+newLines-1+editContext, len(all))
	if to-from > 40 {
		to = from + 40
	}
	fmt.Fprintf(&b, " Lines %d-%d now read:\n", from, to)
	for n := from; n <= to; n++ {
		fmt.Fprintf(&b, "%6d\t%s\n", n, clip(clean(strings.TrimSuffix(all[n-1], "\r")), DefaultReadLineBytes))
	}
	return Result{Output: b.String(), Paths: []string{p}}
}

// noMatchMessage explains a failed match and shows the most similar lines.
func noMatchMessage(p, text, old string) string {
	fileLines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	want := strings.Split(strings.TrimSuffix(old, "\n"), "\n")
	msg := fmt.Sprintf("old_string was not found in %s.", p)
	m, ok := nearest(fileLines, want)
	if !ok || m.score < 0.5 {
		return msg + " Nothing in the file resembles it; read the file to see its current content."
	}
	var b strings.Builder
	b.WriteString(msg)
	fmt.Fprintf(&b, " The most similar text is at lines %d-%d:\n", m.start+1, m.start+m.n)
	for j := 0; j < m.n && j < 30; j++ {
		fmt.Fprintf(&b, "%6d\t%s\n", m.start+j+1, clip(clean(fileLines[m.start+j]), 500))
	}
	if m.n > 30 {
		fmt.Fprintf(&b, "       … (%d more lines)\n", m.n-30)
	}
	if m.differ < 0 {
		// Equal once trimmed: find the first line whose whitespace differs.
		for j := 0; j < m.n; j++ {
			if fileLines[m.start+j] != want[j] {
				fmt.Fprintf(&b, "They differ only in whitespace: line %d is %q in the file, %q in old_string. Copy the indentation exactly (tabs vs spaces).",
					m.start+j+1, clip(fileLines[m.start+j], 200), clip(want[j], 200))
				return b.String()
			}
		}
		b.WriteString("They differ only in line endings or trailing whitespace. Copy the lines exactly as shown.")
		return b.String()
	}
	j := m.differ
	fmt.Fprintf(&b, "First difference: line %d is %q in the file, but old_string has %q. Read the file again if it may have changed, and copy old_string from it exactly.",
		m.start+j+1, clip(fileLines[m.start+j], 200), clip(want[j], 200))
	return b.String()
}

// occurrenceLines returns the 1-based line numbers where up to max
// occurrences of sub start.
func occurrenceLines(text, sub string, max int) []int {
	var out []int
	line, pos := 1, 0
	for len(out) < max {
		i := strings.Index(text[pos:], sub)
		if i < 0 {
			break
		}
		line += strings.Count(text[pos:pos+i], "\n")
		out = append(out, line)
		line += strings.Count(sub, "\n")
		pos += i + len(sub)
	}
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
