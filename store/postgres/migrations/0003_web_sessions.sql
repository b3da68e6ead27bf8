-- Browsers' sign-ins (store.WebSessions), as store/sqlite's "web-sessions"
-- migration. token_id has no foreign key, as in SQLite: a web session of
-- a token that does not exist is stored and never resolves (the read
-- joins tokens); DeleteToken deletes the token's web sessions.

CREATE TABLE web_sessions (
	hash       bytea PRIMARY KEY,                   -- SHA-256 of the cookie's secret
	token_id   text COLLATE "C" NOT NULL,           -- the API token it was signed in with
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX web_sessions_token ON web_sessions (token_id);
CREATE INDEX web_sessions_expires ON web_sessions (expires_at);
