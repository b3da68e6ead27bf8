-- When a delivery is due and how often it was replayed; GitHub's limits
-- as the nodes share them (store.GitHubMark).
ALTER TABLE deliveries ADD COLUMN not_before timestamptz;
ALTER TABLE deliveries ADD COLUMN replays bigint NOT NULL DEFAULT 0;
CREATE INDEX deliveries_received ON deliveries (received_at DESC, id DESC);
CREATE TABLE github_marks (
	scope text COLLATE "C" NOT NULL,        -- installation:ID, app, token, repo:owner/name
	kind  text COLLATE "C" NOT NULL,        -- secondary, core, suspended, pushed, ...
	until timestamptz NOT NULL,
	note  text NOT NULL DEFAULT '',
	PRIMARY KEY (scope, kind)
);
