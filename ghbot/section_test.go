package ghbot

import "testing"

// TestReplaceSection: Harvest's section of a pull request's body is
// rewritten between its markers and nothing else changes; a body whose
// markers a person removed (either one) is not Harvest's to write.
func TestReplaceSection(t *testing.T) {
	sec := func(s string) string { return sectionBegin + "\n" + s + "\n" + sectionEnd }
	for _, c := range []struct {
		name, body, section, want string
		ok                        bool
	}{
		{"rewritten", "Notes 1.\n\n" + sec("old") + "\n\nSigned off.", "new", "Notes 1.\n\n" + sec("new") + "\n\nSigned off.", true},
		{"alone", sec("old"), "new\nlines", sec("new\nlines"), true},
		{"an end before the beginning", sectionEnd + " quoted\n" + sec("old"), "new", sectionEnd + " quoted\n" + sec("new"), true},
		{"no beginning", "Notes.\n" + sectionEnd, "new", "Notes.\n" + sectionEnd, false},
		{"no end", "Notes.\n" + sectionBegin + "\nold", "new", "Notes.\n" + sectionBegin + "\nold", false},
		{"none", "A person's pull request.", "new", "A person's pull request.", false},
	} {
		got, ok := replaceSection(c.body, c.section)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %q, %v\nwant %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
