package ghbot

import "testing"

// TestReadMention: a mention counts where a reader sees it, not in code,
// quotes or HTML comments; the request keeps everything but the mention.
func TestReadMention(t *testing.T) {
	for _, tc := range []struct {
		body, want string
		ok         bool
	}{
		{"@harvest fix the failing test", "fix the failing test", true},
		{"please @Harvest, fix it", "please , fix it", true},
		{"**@harvest** fix it", "**** fix it", true},
		{"- [ ] @harvest fix it", "- [ ]  fix it", true},
		{"fix this:\n\n```\ntrace\n```\n\n@harvest", "fix this:\n\n```\ntrace\n```", true},
		{"@harvest fix\n\n```go\n// @harvest inside\n```", "fix\n\n```go\n// @harvest inside\n```", true},
		{"`@harvest fix it`", "", false},
		{"run `@harvest fix it` to ask", "", false},
		{"```\n@harvest fix it\n```", "", false},
		{"~~~\n@harvest fix it\n~~~", "", false},
		{"text\n\n    @harvest fix it (indented code)", "", false},
		{"> @harvest fix it\n\nAs quoted above.", "", false},
		{"> quoting\n> @harvest fix it", "", false},
		{"<!-- @harvest fix it -->", "", false},
		{"hello <!-- @harvest --> world", "", false},
		{"@harvest-dev fix it", "", false},
		{"@harvestbot fix it", "", false},
		{"mail harvest@harvest.example", "", false},
		{"ping me@harvest now", "", false},
		{"no mention here", "", false},
		{"cc @harvest.", "cc .", true},
	} {
		got, ok := readMention(tc.body, "@harvest")
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("readMention(%q) = %q, %v; want %q, %v", tc.body, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCommand(t *testing.T) {
	for in, want := range map[string]string{
		"stop": cmdStop, " Stop. ": cmdStop, "status?": cmdStatus, "help": cmdHelp, "HELP!": cmdHelp,
		"stop using tabs": "", "fix it": "", "": "", "helpful": "",
	} {
		if got := command(in); got != want {
			t.Errorf("command(%q) = %q, want %q", in, got, want)
		}
	}
}
