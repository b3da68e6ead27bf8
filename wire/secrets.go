package wire

import "time"

// SecretRequest is the body of PUT /v1/secrets/{scope}/{name}.
type SecretRequest struct {
	// Value is stored encrypted and never shown again.
	Value string `json:"value"`
	// Session: also in the sessions' environments (default: only setup
	// scripts get it).
	Session bool `json:"session,omitempty"`
}

// Secret is a secret as the API shows it: never its value.
type Secret struct {
	// Scope is "repo:owner/name" or "user:<token id>".
	Scope   string `json:"scope"`
	Name    string `json:"name"`
	Session bool   `json:"session"`
	SetBy   string `json:"set_by"`
	// SetByUser is the user of the token that set it.
	SetByUser string    `json:"set_by_user,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []*Secret `json:"secrets"`
}
