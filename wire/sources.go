package wire

// SourceList is the body of GET /v1/sources: the repositories a caller
// may start sessions on, for a form to offer (the policy itself decides:
// a source not listed may still be allowed, an admin's any directory).
type SourceList struct {
	// Repositories are the directories under the server's repository
	// roots (--repo-root), each a source as a session names it.
	Repositories []SourceEntry `json:"repositories"`
	// Truncated says there were more than were listed.
	Truncated bool `json:"truncated,omitempty"`
	// GitHosts are the hosts https:// git URLs may name (--git-host;
	// "*.example.com" for its subdomains).
	GitHosts []string `json:"git_hosts"`
	// GitHub says repositories may be named owner/name (the server speaks
	// to GitHub).
	GitHub bool `json:"github"`
	// AnyDirectory says the caller may name any directory on the server
	// (an admin token), not only those under the roots.
	AnyDirectory bool `json:"any_directory"`
}

// SourceEntry is one listed repository.
type SourceEntry struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	// Git says it is a git repository (it has .git).
	Git bool `json:"git"`
}
