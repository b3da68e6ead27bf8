-- Event retention (store/retention.go): how far each session's events
-- are compacted.
CREATE TABLE event_retention (
	sid          bigint PRIMARY KEY REFERENCES sessions (sid) ON DELETE CASCADE,
	through_seq  bigint NOT NULL,              -- every event with seq <= it is compacted
	compacted_at timestamptz NOT NULL
);
