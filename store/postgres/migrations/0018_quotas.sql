-- Budgets (store/quotas.go), as store/sqlite's "quotas" migration: a
-- user's or a team's caps, and each user's model spend per day (UTC).
-- Counting a subject's live sessions reads sessions by user and state.

CREATE TABLE quotas (
	scope        text COLLATE "C" NOT NULL,   -- user | team
	subject      text COLLATE "C" NOT NULL,   -- the user's id, the team's name
	daily_usd    double precision NOT NULL,   -- 0: no cap
	max_sessions integer NOT NULL,            -- 0: no cap
	updated_at   timestamptz NOT NULL,
	PRIMARY KEY (scope, subject)
);
CREATE TABLE spend (
	user_id text COLLATE "C" NOT NULL,
	day     text COLLATE "C" NOT NULL,        -- 2006-01-02, UTC
	usd     double precision NOT NULL,
	PRIMARY KEY (user_id, day)
);
CREATE INDEX spend_day ON spend (day, user_id);
CREATE INDEX sessions_user_state ON sessions (user_id, state);
