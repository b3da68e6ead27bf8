package wire

// Changes is GET /v1/sessions/{id}/diff: each repository's changes since
// the session started, read in its box.
type Changes struct {
	Repos []RepoChanges `json:"repos"`
}

// RepoChanges is one repository's changes: the working tree (committed or
// not) against Base, and the untracked files. Error, when set, says why
// they could not be read (the other repositories' still are).
type RepoChanges struct {
	Repo string `json:"repo"`
	// Base is the commit compared against: where the session started
	// (BaseKnown), or, for a session older than that record, HEAD (only
	// uncommitted changes show).
	Base      string       `json:"base"`
	BaseKnown bool         `json:"base_known"`
	Files     []FileChange `json:"files"`
	Additions int          `json:"additions"`
	Deletions int          `json:"deletions"`
	// Truncated: files or patch text were left out (the size caps).
	Truncated bool   `json:"truncated"`
	Error     string `json:"error,omitempty"`
}

// FileChange is one changed file.
type FileChange struct {
	Path    string `json:"path"`
	OldPath string `json:"old_path,omitempty"`
	// Status: added, modified, deleted, renamed, copied, typechange or
	// untracked.
	Status    string `json:"status"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
	Binary    bool   `json:"binary,omitempty"`
	// Patch is the file's unified diff ("diff --git" header included);
	// empty for a binary file or one past the caps.
	Patch     string `json:"patch"`
	Truncated bool   `json:"truncated,omitempty"`
}
