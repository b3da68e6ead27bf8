-- A Slack thread's progress message and the message that asked, of its
-- last turn (store/slack.go, SetSlackThreadTurn), as store/sqlite's
-- "slack-turn" migration: a restart, or the node taking the session over,
-- edits that message and marks the right one.
ALTER TABLE slack_threads ADD COLUMN turn text NOT NULL DEFAULT '';
ALTER TABLE slack_threads ADD COLUMN progress_ts text NOT NULL DEFAULT '';
ALTER TABLE slack_threads ADD COLUMN trigger_ts text NOT NULL DEFAULT '';
