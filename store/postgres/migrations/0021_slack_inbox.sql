-- Slack events kept until done (store/slack_inbox.go), as store/sqlite's
-- "slack_inbox" migration: a pending event's payload, processed again
-- after a crash.
ALTER TABLE slack_events ADD COLUMN payload bytea;                  -- the event while pending; NULL once done
CREATE INDEX slack_events_pending ON slack_events (received_at) WHERE payload IS NOT NULL;
