-- People (store/people.go) and the audit log, as store/sqlite's "people"
-- migration. Every token but a node's becomes a user of its own
-- (store.UserIDForToken: admin tokens admins, the others members), and
-- every session its owner token's user; a GitHub requester becomes a user
-- with a github identity (one per GitHub user id), and the sessions
-- GitHub started for them theirs. user_id columns have no foreign key, as
-- tokens' web sessions: a node's token and an old session have none ('').

CREATE TABLE users (
	id         text COLLATE "C" PRIMARY KEY,   -- usr-...
	name       text NOT NULL,
	role       text NOT NULL,                  -- store.RoleAdmin|RoleMember|RoleViewer
	disabled   boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL
);
CREATE TABLE identities (
	kind       text COLLATE "C" NOT NULL,      -- github|oidc|slack
	issuer     text COLLATE "C" NOT NULL DEFAULT '',  -- '' for GitHub
	subject    text COLLATE "C" NOT NULL,      -- GitHub's user id, OIDC's sub
	user_id    text COLLATE "C" NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	login      text NOT NULL DEFAULT '',
	email      text NOT NULL DEFAULT '',       -- verified
	created_at timestamptz NOT NULL,
	PRIMARY KEY (kind, issuer, subject)
);
CREATE INDEX identities_user ON identities (user_id);
ALTER TABLE tokens ADD COLUMN user_id text COLLATE "C" NOT NULL DEFAULT '';       -- '' for a node's token
CREATE INDEX tokens_user ON tokens (user_id);
ALTER TABLE sessions ADD COLUMN user_id text COLLATE "C" NOT NULL DEFAULT '';     -- who caused it
CREATE INDEX sessions_user_created ON sessions (user_id, created_at DESC, id DESC);
ALTER TABLE secrets ADD COLUMN set_by_user text NOT NULL DEFAULT '';
ALTER TABLE environments ADD COLUMN user_id text NOT NULL DEFAULT '';             -- who asked for it
CREATE TABLE audit (
	id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- increasing; entries are never deleted
	time    timestamptz NOT NULL,
	user_id text COLLATE "C" NOT NULL DEFAULT '',
	token   text NOT NULL DEFAULT '',
	channel text NOT NULL,                     -- api|ui|cli|github|node
	remote  text NOT NULL DEFAULT '',
	action  text COLLATE "C" NOT NULL,
	target  text NOT NULL DEFAULT '',
	result  text NOT NULL,                     -- ok, or the error code
	detail  jsonb                              -- an object, NULL for none
);
CREATE INDEX audit_time ON audit (time);
CREATE INDEX audit_user ON audit (user_id, id);
CREATE INDEX audit_action ON audit (action, id);

INSERT INTO users (id, name, role, disabled, created_at)
SELECT CASE WHEN substr(id, 1, 4) = 'tok-' THEN 'usr-' || substr(id, 5) ELSE 'usr-' || id END,
	name, CASE WHEN admin THEN 'admin' ELSE 'member' END, false, created_at
FROM tokens WHERE substr(name, 1, 5) <> 'node:';
UPDATE tokens SET user_id = CASE WHEN substr(id, 1, 4) = 'tok-' THEN 'usr-' || substr(id, 5) ELSE 'usr-' || id END
WHERE substr(name, 1, 5) <> 'node:';
UPDATE sessions s SET user_id = t.user_id FROM tokens t WHERE t.id = s.owner;

-- A requester's name is the login of their newest session.
CREATE TEMPORARY TABLE requesters ON COMMIT DROP AS
SELECT DISTINCT ON (rid) rid, login, first FROM (
	SELECT (github->>'requester_id')::bigint AS rid, COALESCE(github->>'requester', '') AS login, created_at,
		min(created_at) OVER (PARTITION BY (github->>'requester_id')::bigint) AS first
	FROM sessions WHERE owner = 'github' AND github IS NOT NULL AND COALESCE((github->>'requester_id')::bigint, 0) > 0) r
ORDER BY rid, created_at DESC;
INSERT INTO users (id, name, role, disabled, created_at)
SELECT 'usr-gh' || rid, login, 'member', false, first FROM requesters ON CONFLICT DO NOTHING;
INSERT INTO identities (kind, issuer, subject, user_id, login, email, created_at)
SELECT 'github', '', rid::text, 'usr-gh' || rid, login, '', first FROM requesters ON CONFLICT DO NOTHING;
UPDATE sessions SET user_id = 'usr-gh' || (github->>'requester_id')::bigint
WHERE owner = 'github' AND github IS NOT NULL AND COALESCE((github->>'requester_id')::bigint, 0) > 0;
