-- Slack (store/slack.go), as store/sqlite's "slack" migration: the events
-- processed (an event delivered twice is processed once), each session's
-- thread, each channel's default repository.
CREATE TABLE slack_events (
	id          text COLLATE "C" PRIMARY KEY,   -- event_id (or a click's, a command's own key)
	received_at timestamptz NOT NULL
);
CREATE INDEX slack_events_received ON slack_events (received_at);
CREATE TABLE slack_threads (
	session_id text COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	team       text NOT NULL,
	channel    text NOT NULL,
	thread_ts  text NOT NULL,
	slack_user text NOT NULL DEFAULT '',
	shown      bigint NOT NULL DEFAULT 0,   -- the seq the thread shows the turns up to
	created_at timestamptz NOT NULL
);
CREATE TABLE slack_channels (
	team       text COLLATE "C" NOT NULL,
	channel    text COLLATE "C" NOT NULL,
	repo       text NOT NULL,
	set_by     text NOT NULL DEFAULT '',
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (team, channel)
);
