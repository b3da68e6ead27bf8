package wire

import "time"

// Team is a named group of users that a server's repository policy
// names (harvest serve --repo-root 'DIR?read=team:NAME').
type Team struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// Members are the ids of its users, sorted.
	Members []string `json:"members"`
}

// TeamList is the answer of GET /v1/teams.
type TeamList struct {
	Teams []*Team `json:"teams"`
}

// TeamRequest is the body of POST /v1/teams.
type TeamRequest struct {
	// Name: lower-case letters, digits and dashes, starting with a
	// letter, at most 40.
	Name string `json:"name"`
}

// TeamMemberRequest is the body of POST /v1/teams/{team}/members.
type TeamMemberRequest struct {
	User string `json:"user"`
}
