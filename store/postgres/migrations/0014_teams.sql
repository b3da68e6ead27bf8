-- Teams (store/teams.go), as store/sqlite's "teams" migration: named
-- groups of users that a server's repository policy names (package
-- access). A team's or a user's removal takes its memberships with it.

CREATE TABLE teams (
	name       text COLLATE "C" PRIMARY KEY,   -- store.TeamNamePattern
	created_at timestamptz NOT NULL
);
CREATE TABLE team_members (
	team    text COLLATE "C" NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
	user_id text COLLATE "C" NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	PRIMARY KEY (team, user_id)
);
CREATE INDEX team_members_user ON team_members (user_id);
