-- Slack accounts waiting to be linked by hand (store/slack.go), as
-- store/sqlite's "slack_links" migration: the SHA-256 of the code each
-- was given, for a few minutes.
CREATE TABLE slack_links (
	hash       bytea PRIMARY KEY,             -- SHA-256 of the code
	team       text NOT NULL,
	slack_user text NOT NULL,
	name       text NOT NULL DEFAULT '',      -- the account's name in Slack
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX slack_links_expires ON slack_links (expires_at);
