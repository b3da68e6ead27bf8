-- Sign-in with GitHub or an OIDC provider (store/signin.go), as
-- store/sqlite's "signin" migration: a web session may stand for a user
-- with no token; the sign-ins under way; what GitHub granted (sealed by
-- the server).

ALTER TABLE web_sessions ADD COLUMN user_id text COLLATE "C" NOT NULL DEFAULT '';  -- a user's own sign-in ('' for a token's)
ALTER TABLE web_sessions ADD COLUMN via text NOT NULL DEFAULT '';                  -- token|github|oidc
CREATE INDEX web_sessions_user ON web_sessions (user_id);
CREATE TABLE signin_flows (
	hash       bytea PRIMARY KEY,             -- SHA-256 of the state
	provider   text NOT NULL,                 -- github|oidc
	verifier   text NOT NULL,                 -- PKCE code verifier
	nonce      text NOT NULL DEFAULT '',
	return_to  text NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX signin_flows_expires ON signin_flows (expires_at);
CREATE TABLE oauth_grants (
	user_id            text COLLATE "C" NOT NULL,
	provider           text COLLATE "C" NOT NULL,   -- github
	access             bytea NOT NULL,              -- sealed (package secrets)
	refresh            bytea NOT NULL,              -- sealed; empty for none
	expires_at         timestamptz,                 -- NULL: does not expire
	refresh_expires_at timestamptz,
	updated_at         timestamptz NOT NULL,
	PRIMARY KEY (user_id, provider)
);
