package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are applied in order; migration i has version i+1. Never edit
// one that has shipped: add a new one.
var migrations = []struct {
	name string
	sql  string
}{
	{"initial", `
CREATE TABLE sessions (
	sid         INTEGER PRIMARY KEY,          -- the events' compact key
	id          TEXT NOT NULL UNIQUE,
	owner       TEXT NOT NULL,
	title       TEXT NOT NULL DEFAULT '',
	state       TEXT NOT NULL,
	agent       TEXT NOT NULL DEFAULT '',
	model       TEXT NOT NULL DEFAULT '',
	backend     TEXT NOT NULL DEFAULT '',
	mode        TEXT NOT NULL DEFAULT '',
	repos       TEXT NOT NULL DEFAULT 'null', -- JSON []store.Repo
	limits      TEXT NOT NULL DEFAULT '{}',   -- JSON store.Limits
	sandbox     BLOB,
	agent_state BLOB,
	turns       INTEGER NOT NULL DEFAULT 0,
	usage       TEXT NOT NULL DEFAULT '{}',   -- JSON event.Usage
	cost_usd    REAL NOT NULL DEFAULT 0,
	error       TEXT NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,             -- ns since the epoch, UTC
	updated_at  INTEGER NOT NULL,
	active_at   INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX sessions_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_owner ON sessions (owner, created_at DESC);
CREATE INDEX sessions_state ON sessions (state);
CREATE INDEX sessions_updated ON sessions (updated_at);

CREATE TABLE messages (
	session      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq          INTEGER NOT NULL,
	id           TEXT NOT NULL,
	text         TEXT NOT NULL,
	mode         TEXT NOT NULL DEFAULT '',
	state        TEXT NOT NULL,
	turn         TEXT NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL,
	delivered_at INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (session, seq),
	UNIQUE (session, id)
) STRICT;

CREATE TABLE events (
	sid     INTEGER NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
	seq     INTEGER NOT NULL,
	type    TEXT NOT NULL,
	time    INTEGER NOT NULL,
	turn    TEXT NOT NULL DEFAULT '',
	agent   TEXT NOT NULL DEFAULT '',
	repo    TEXT NOT NULL DEFAULT '',
	data    BLOB NOT NULL,                    -- JSON payload
	PRIMARY KEY (sid, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE locks (
	key     TEXT PRIMARY KEY,
	holder  TEXT NOT NULL,
	expires INTEGER NOT NULL
) STRICT;

CREATE TABLE tokens (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	hash       BLOB NOT NULL UNIQUE,
	admin      INTEGER NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
`},
	{"collab", `
ALTER TABLE sessions ADD COLUMN collab TEXT NOT NULL DEFAULT '{}'; -- JSON store.Collab
CREATE INDEX sessions_workflow ON sessions (json_extract(collab, '$.workflow')) WHERE collab <> '{}';
`},
	{"terminal", `
ALTER TABLE sessions ADD COLUMN terminal TEXT NOT NULL DEFAULT ''; -- JSON store.TerminalCLI, '' for none
`},
	{"egress", `
ALTER TABLE sessions ADD COLUMN egress TEXT NOT NULL DEFAULT ''; -- JSON array of hosts, '' for the server's allowlist
`},
	{"idempotency", `
ALTER TABLE messages ADD COLUMN key_owner TEXT NOT NULL DEFAULT '';  -- the API token that sent it with idem_key
ALTER TABLE messages ADD COLUMN idem_key TEXT NOT NULL DEFAULT '';   -- its Idempotency-Key, '' for none
ALTER TABLE messages ADD COLUMN request_hash BLOB;                   -- what was sent with the key
CREATE UNIQUE INDEX messages_idem_key ON messages (session, key_owner, idem_key) WHERE idem_key <> '';
`},
	// Before AppendEventsWith a message and its message.queued event were
	// two commits, and a crash between them lost the event for good: give
	// every such message its event now, after the session's last one, at
	// the message's time (position 0 for one no longer queued: unknown).
	{"repair-message-queued", `
INSERT INTO events (sid, seq, type, time, turn, agent, repo, data)
SELECT s.sid,
	(SELECT COALESCE(MAX(e.seq), 0) FROM events e WHERE e.sid = s.sid) + ROW_NUMBER() OVER (PARTITION BY s.sid ORDER BY m.seq),
	'message.queued', m.created_at, '', '', '',
	CAST(json_object('message_id', m.id, 'text', m.text, 'mode', m.mode, 'position',
		CASE WHEN m.state = 'queued'
			THEN (SELECT COUNT(*) FROM messages q WHERE q.session = m.session AND q.state = 'queued' AND q.seq <= m.seq)
			ELSE 0 END) AS BLOB)
FROM messages m JOIN sessions s ON s.id = m.session
WHERE m.state IN ('queued', 'delivered')
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.sid = s.sid AND e.type = 'message.queued'
		AND json_extract(CAST(e.data AS TEXT), '$.message_id') = m.id);
`},
	{"github", `
ALTER TABLE sessions ADD COLUMN pr TEXT NOT NULL DEFAULT '';     -- store.PRDraft|PRReady|PRNone, '' for no GitHub repository
ALTER TABLE sessions ADD COLUMN github TEXT NOT NULL DEFAULT ''; -- JSON store.GitHubLink, '' for none
CREATE TABLE deliveries (
	id          TEXT PRIMARY KEY,            -- X-GitHub-Delivery
	event       TEXT NOT NULL,
	payload     BLOB NOT NULL,
	received_at INTEGER NOT NULL,
	state       TEXT NOT NULL,               -- store.DeliveryPending|Done|Failed
	attempts    INTEGER NOT NULL DEFAULT 0,
	result      TEXT NOT NULL DEFAULT '',
	done_at     INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX deliveries_pending ON deliveries (received_at) WHERE state = 'pending';
`},
	{"environments", `
CREATE TABLE environments (
	id          TEXT PRIMARY KEY,
	repo        TEXT NOT NULL,
	name        TEXT NOT NULL,
	ref         TEXT NOT NULL DEFAULT '',
	commit_sha  TEXT NOT NULL DEFAULT '',
	fingerprint TEXT NOT NULL,
	backend     TEXT NOT NULL,
	state       TEXT NOT NULL,               -- store.EnvBuilding|Ready|Failed|Removed
	detected    TEXT NOT NULL DEFAULT '[]',  -- JSON []string
	error       TEXT NOT NULL DEFAULT '',
	size_bytes  INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	built_at    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX environments_repo ON environments (repo, backend, created_at);
ALTER TABLE sessions ADD COLUMN environment TEXT NOT NULL DEFAULT ''; -- the store.Environment it started from
`},
	{"secrets", `
CREATE TABLE secrets (
	scope      TEXT NOT NULL,               -- repo:owner/name (lower case) | user:<token id>
	name       TEXT NOT NULL,               -- an environment variable's name
	ciphertext BLOB NOT NULL,               -- package secrets: version, nonce, AES-256-GCM sealed value
	key_id     TEXT NOT NULL,               -- the key that sealed it
	session    INTEGER NOT NULL DEFAULT 0,  -- also in sessions' environments
	set_by     TEXT NOT NULL DEFAULT '',    -- the API token that last set it
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (scope, name)
) STRICT, WITHOUT ROWID;
`},
	{"memory", `
CREATE TABLE memory_entities (
	id         INTEGER PRIMARY KEY,
	repo       TEXT NOT NULL,               -- store.MemoryScope: the repository's key
	owner      TEXT NOT NULL DEFAULT '',    -- a token id, '' for the repository's shared memory
	name       TEXT NOT NULL,
	type       TEXT NOT NULL,
	session    TEXT NOT NULL DEFAULT '',    -- the write that created it
	turn       INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	UNIQUE (repo, owner, name)
) STRICT;
CREATE TABLE memory_observations (
	id         INTEGER PRIMARY KEY,         -- orders an entity's observations
	entity     INTEGER NOT NULL REFERENCES memory_entities (id) ON DELETE CASCADE,
	text       TEXT NOT NULL,
	session    TEXT NOT NULL DEFAULT '',
	turn       INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	UNIQUE (entity, text)
) STRICT;
CREATE TABLE memory_relations (
	id         INTEGER PRIMARY KEY,
	src        INTEGER NOT NULL REFERENCES memory_entities (id) ON DELETE CASCADE,
	dst        INTEGER NOT NULL REFERENCES memory_entities (id) ON DELETE CASCADE,
	type       TEXT NOT NULL,
	session    TEXT NOT NULL DEFAULT '',
	turn       INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	UNIQUE (src, dst, type)
) STRICT;
CREATE INDEX memory_relations_dst ON memory_relations (dst);
CREATE TABLE memory_seeded (
	repo      TEXT NOT NULL,
	owner     TEXT NOT NULL DEFAULT '',
	seeded_at INTEGER NOT NULL,
	PRIMARY KEY (repo, owner)
) STRICT, WITHOUT ROWID;
`},
	{"web-sessions", `
CREATE TABLE web_sessions (
	hash       BLOB PRIMARY KEY,            -- SHA-256 of the cookie's secret
	token_id   TEXT NOT NULL,               -- the API token it was signed in with
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX web_sessions_token ON web_sessions (token_id);
`},
	{"mcp-servers", `
ALTER TABLE sessions ADD COLUMN mcp_servers TEXT NOT NULL DEFAULT ''; -- JSON []store.MCPServer, '' for none
`},
	// Nodes and session leases (store/leases.go): the lease keeps its
	// epoch when released (node ''), so epochs never go back.
	{"leases", `
CREATE TABLE nodes (
	id        TEXT PRIMARY KEY,
	addr      TEXT NOT NULL DEFAULT '',
	capacity  INTEGER NOT NULL DEFAULT 0,   -- max sessions, 0 for no bound
	heartbeat INTEGER NOT NULL,             -- the last one
	expires   INTEGER NOT NULL              -- live until then
) STRICT, WITHOUT ROWID;
CREATE TABLE session_leases (
	session TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	node    TEXT NOT NULL,                  -- the holder, '' once released
	epoch   INTEGER NOT NULL,               -- 1, 2, ...: one more at every change of hands
	expires INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX session_leases_node ON session_leases (node) WHERE node <> '';
`},
	// Workspaces carried between nodes (store/carry.go).
	{"carry", `
CREATE TABLE workspace_packs (
	hash       TEXT PRIMARY KEY,            -- hex SHA-256 of data
	data       BLOB NOT NULL,
	created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE workspace_checkpoints (
	session    TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	instance   TEXT NOT NULL,
	node       TEXT NOT NULL,
	turn       TEXT NOT NULL,
	manifest   BLOB NOT NULL,
	bytes      INTEGER NOT NULL,
	files      INTEGER NOT NULL,
	created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE workspace_checkpoint_packs (
	session TEXT NOT NULL REFERENCES workspace_checkpoints (session) ON DELETE CASCADE,
	hash    TEXT NOT NULL REFERENCES workspace_packs (hash),
	PRIMARY KEY (session, hash)
) STRICT, WITHOUT ROWID;
CREATE INDEX workspace_checkpoint_packs_hash ON workspace_checkpoint_packs (hash);
`},
	// Which of a session's limits its box is held to (store.Enforcement).
	{"limits-enforced", `
ALTER TABLE sessions ADD COLUMN limits_enforced TEXT NOT NULL DEFAULT ''; -- JSON store.Enforcement, '' before the first box
`},
	// One live session per repository branch (store/branches.go). The
	// live sessions of before get their claims, the oldest first: of two
	// on one branch (the bug this fixes), the younger holds nothing.
	{"branch-claims", `
CREATE TABLE branch_claims (
	repo    TEXT NOT NULL,                  -- owner/name, lower case
	branch  TEXT NOT NULL,
	session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	PRIMARY KEY (repo, branch)
) STRICT, WITHOUT ROWID;
CREATE INDEX branch_claims_session ON branch_claims (session);
INSERT OR IGNORE INTO branch_claims (repo, branch, session)
SELECT lower(json_extract(r.value, '$.github')), json_extract(r.value, '$.branch'), s.id
FROM sessions s, json_each(s.repos) r
WHERE s.state NOT IN ('stopped', 'failed') AND s.repos <> 'null'
	AND COALESCE(json_extract(r.value, '$.github'), '') <> '' AND COALESCE(json_extract(r.value, '$.branch'), '') <> ''
ORDER BY s.created_at, s.id;
`},
	// When a delivery is due and how often it was replayed; GitHub's
	// limits as the nodes share them (store.GitHubMark).
	{"github-limits", `
ALTER TABLE deliveries ADD COLUMN not_before INTEGER NOT NULL DEFAULT 0; -- 0: due now
ALTER TABLE deliveries ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
CREATE INDEX deliveries_received ON deliveries (received_at DESC, id DESC);
CREATE TABLE github_marks (
	scope TEXT NOT NULL,                   -- installation:ID, app, token, repo:owner/name
	kind  TEXT NOT NULL,                   -- secondary, core, suspended, pushed, ...
	until INTEGER NOT NULL,                -- ns since the epoch, UTC
	note  TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (scope, kind)
) STRICT, WITHOUT ROWID;
`},
	// GET /v1/sessions pages by keyset on (created_at, id), newest first; a
	// token that is not an admin's lists its own sessions only, so its pages
	// seek this index instead of sorting all of its sessions for each page.
	// It replaces sessions_owner (owner, created_at DESC), which it covers.
	{"sessions-owner-keyset", `
CREATE INDEX sessions_owner_created ON sessions (owner, created_at DESC, id DESC);
DROP INDEX sessions_owner;
`},
	// People (store/people.go) and the audit log. Every token but a
	// node's becomes a user of its own (store.UserIDForToken: admin
	// tokens admins, the others members), and every session its owner
	// token's user; a GitHub requester becomes a user with a github
	// identity (one per GitHub user id), and the sessions GitHub started
	// for them theirs.
	{"people", `
CREATE TABLE users (
	id         TEXT PRIMARY KEY,             -- usr-...
	name       TEXT NOT NULL,
	role       TEXT NOT NULL,                -- store.RoleAdmin|RoleMember|RoleViewer
	disabled   INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE identities (
	kind       TEXT NOT NULL,                -- github|oidc|slack
	issuer     TEXT NOT NULL DEFAULT '',     -- '' for GitHub
	subject    TEXT NOT NULL,                -- GitHub's user id, OIDC's sub
	user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	login      TEXT NOT NULL DEFAULT '',
	email      TEXT NOT NULL DEFAULT '',     -- verified
	created_at INTEGER NOT NULL,
	PRIMARY KEY (kind, issuer, subject)
) STRICT, WITHOUT ROWID;
CREATE INDEX identities_user ON identities (user_id);
ALTER TABLE tokens ADD COLUMN user_id TEXT NOT NULL DEFAULT '';       -- '' for a node's token
CREATE INDEX tokens_user ON tokens (user_id);
ALTER TABLE sessions ADD COLUMN user_id TEXT NOT NULL DEFAULT '';     -- who caused it
CREATE INDEX sessions_user_created ON sessions (user_id, created_at DESC, id DESC);
ALTER TABLE secrets ADD COLUMN set_by_user TEXT NOT NULL DEFAULT '';
ALTER TABLE environments ADD COLUMN user_id TEXT NOT NULL DEFAULT ''; -- who asked for it
CREATE TABLE audit (
	id      INTEGER PRIMARY KEY,               -- increasing; entries are never deleted
	time    INTEGER NOT NULL,
	user_id TEXT NOT NULL DEFAULT '',
	token   TEXT NOT NULL DEFAULT '',
	channel TEXT NOT NULL,                     -- api|ui|cli|github|node
	remote  TEXT NOT NULL DEFAULT '',
	action  TEXT NOT NULL,
	target  TEXT NOT NULL DEFAULT '',
	result  TEXT NOT NULL,                     -- ok, or the error code
	detail  TEXT NOT NULL DEFAULT ''           -- JSON object, '' for none
) STRICT;
CREATE INDEX audit_time ON audit (time);
CREATE INDEX audit_user ON audit (user_id, id);
CREATE INDEX audit_action ON audit (action, id);

INSERT INTO users (id, name, role, disabled, created_at)
SELECT CASE WHEN substr(id, 1, 4) = 'tok-' THEN 'usr-' || substr(id, 5) ELSE 'usr-' || id END,
	name, CASE WHEN admin THEN 'admin' ELSE 'member' END, 0, created_at
FROM tokens WHERE substr(name, 1, 5) <> 'node:';
UPDATE tokens SET user_id = CASE WHEN substr(id, 1, 4) = 'tok-' THEN 'usr-' || substr(id, 5) ELSE 'usr-' || id END
WHERE substr(name, 1, 5) <> 'node:';
UPDATE sessions SET user_id = (SELECT t.user_id FROM tokens t WHERE t.id = sessions.owner)
WHERE owner IN (SELECT id FROM tokens);

-- A requester's name is the login of their newest session.
CREATE TEMP TABLE requesters AS
SELECT rid, login, first FROM (
	SELECT CAST(json_extract(github, '$.requester_id') AS INTEGER) AS rid,
		COALESCE(json_extract(github, '$.requester'), '') AS login,
		MIN(created_at) OVER (PARTITION BY CAST(json_extract(github, '$.requester_id') AS INTEGER)) AS first,
		ROW_NUMBER() OVER (PARTITION BY CAST(json_extract(github, '$.requester_id') AS INTEGER) ORDER BY created_at DESC) AS n
	FROM sessions WHERE owner = 'github' AND github <> '' AND COALESCE(json_extract(github, '$.requester_id'), 0) > 0)
WHERE n = 1;
INSERT OR IGNORE INTO users (id, name, role, disabled, created_at)
SELECT 'usr-gh' || rid, login, 'member', 0, first FROM requesters;
INSERT OR IGNORE INTO identities (kind, issuer, subject, user_id, login, email, created_at)
SELECT 'github', '', CAST(rid AS TEXT), 'usr-gh' || rid, login, '', first FROM requesters;
DROP TABLE requesters;
UPDATE sessions SET user_id = 'usr-gh' || CAST(json_extract(github, '$.requester_id') AS INTEGER)
WHERE owner = 'github' AND github <> '' AND COALESCE(json_extract(github, '$.requester_id'), 0) > 0;
`},
	// Sign-in with GitHub or an OIDC provider (store/signin.go): a web
	// session may stand for a user with no token; the sign-ins under way;
	// what GitHub granted (sealed by the server).
	{"signin", `
ALTER TABLE web_sessions ADD COLUMN user_id TEXT NOT NULL DEFAULT '';  -- a user's own sign-in ('' for a token's)
ALTER TABLE web_sessions ADD COLUMN via TEXT NOT NULL DEFAULT '';      -- token|github|oidc
CREATE INDEX web_sessions_user ON web_sessions (user_id);
CREATE TABLE signin_flows (
	hash       BLOB PRIMARY KEY,            -- SHA-256 of the state
	provider   TEXT NOT NULL,               -- github|oidc
	verifier   TEXT NOT NULL,               -- PKCE code verifier
	nonce      TEXT NOT NULL DEFAULT '',
	return_to  TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE oauth_grants (
	user_id            TEXT NOT NULL,
	provider           TEXT NOT NULL,       -- github
	access             BLOB NOT NULL,       -- sealed (package secrets)
	refresh            BLOB NOT NULL,       -- sealed; empty for none
	expires_at         INTEGER NOT NULL,    -- 0: does not expire
	refresh_expires_at INTEGER NOT NULL,
	updated_at         INTEGER NOT NULL,
	PRIMARY KEY (user_id, provider)
) STRICT, WITHOUT ROWID;
`},
	// Event retention (store/retention.go): how far each session's events
	// are compacted.
	{"event-retention", `
CREATE TABLE event_retention (
	sid          INTEGER PRIMARY KEY REFERENCES sessions (sid) ON DELETE CASCADE,
	through_seq  INTEGER NOT NULL,            -- every event with seq <= it is compacted
	compacted_at INTEGER NOT NULL
) STRICT;
`},
	// Teams (store/teams.go): named groups of users that a server's
	// repository policy names (package authz). A team's or a user's
	// removal takes its memberships with it.
	{"teams", `
CREATE TABLE teams (
	name       TEXT PRIMARY KEY,             -- store.TeamNamePattern
	created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE team_members (
	team    TEXT NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
	user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	PRIMARY KEY (team, user_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX team_members_user ON team_members (user_id);
`},
	// A node's heartbeat is the lease of every session it holds
	// (store/leases.go): a lease is an assignment (node, epoch, the node's
	// generation) with no expiry of its own. A node reports how many it
	// holds; moved counts the sessions deleted under it. The takeover scan
	// reads the sessions that may need a node through a partial index.
	{"node-leases", `
ALTER TABLE nodes ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;     -- its generation: its leases of another are over
ALTER TABLE nodes ADD COLUMN ended INTEGER NOT NULL DEFAULT 0;   -- when its previous generation ended (0: none)
ALTER TABLE nodes ADD COLUMN moved INTEGER NOT NULL DEFAULT 0;   -- sessions deleted while it held them
ALTER TABLE nodes ADD COLUMN leases INTEGER NOT NULL DEFAULT 0;  -- how many it holds, as it reported
ALTER TABLE session_leases ADD COLUMN gen INTEGER NOT NULL DEFAULT 0; -- its node's generation it was taken in
ALTER TABLE session_leases DROP COLUMN expires;
DROP INDEX session_leases_node;
CREATE INDEX session_leases_node ON session_leases (node, gen) WHERE node <> '';
CREATE INDEX sessions_needing_node ON sessions (created_at, id, state)
	WHERE state IN ('pending', 'provisioning', 'idle', 'working', 'waiting', 'cancelling', 'suspended');
`},
	// Workspace checkpoints' packs and manifests in an object store
	// (store/carry.go, package store/objstore): the rows keep a reference;
	// data and manifest hold only what was stored before (x'' after).
	{"checkpoint-objects", `
ALTER TABLE workspace_packs ADD COLUMN object TEXT NOT NULL DEFAULT '';        -- its key in the checkpoint store, '' : data holds it
ALTER TABLE workspace_packs ADD COLUMN size INTEGER NOT NULL DEFAULT 0;        -- the object's size
ALTER TABLE workspace_checkpoints ADD COLUMN manifest_object TEXT NOT NULL DEFAULT ''; -- '' : manifest holds it
ALTER TABLE workspace_checkpoints ADD COLUMN manifest_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workspace_checkpoints ADD COLUMN manifest_sha256 TEXT NOT NULL DEFAULT '';
CREATE INDEX workspace_packs_object ON workspace_packs (object) WHERE object <> '';
CREATE INDEX workspace_checkpoints_manifest_object ON workspace_checkpoints (manifest_object) WHERE manifest_object <> '';
`},
	// Slack (store/slack.go): the events processed (an event delivered
	// twice is processed once), each session's thread, each channel's
	// default repository.
	{"slack", `
CREATE TABLE slack_events (
	id          TEXT PRIMARY KEY,            -- event_id (or a click's, a command's own key)
	received_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX slack_events_received ON slack_events (received_at);
CREATE TABLE slack_threads (
	session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	team       TEXT NOT NULL,
	channel    TEXT NOT NULL,
	thread_ts  TEXT NOT NULL,
	slack_user TEXT NOT NULL DEFAULT '',
	shown      INTEGER NOT NULL DEFAULT 0,   -- the seq the thread shows the turns up to
	created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE slack_channels (
	team       TEXT NOT NULL,
	channel    TEXT NOT NULL,
	repo       TEXT NOT NULL,
	set_by     TEXT NOT NULL DEFAULT '',
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (team, channel)
) STRICT, WITHOUT ROWID;
`},
	// Budgets (store/quotas.go): a user's or a team's caps, and each
	// user's model spend per day (UTC). Counting a subject's live
	// sessions reads sessions by user and state.
	{"quotas", `
CREATE TABLE quotas (
	scope        TEXT NOT NULL,               -- user | team
	subject      TEXT NOT NULL,               -- the user's id, the team's name
	daily_usd    REAL NOT NULL,               -- 0: no cap
	max_sessions INTEGER NOT NULL,            -- 0: no cap
	updated_at   INTEGER NOT NULL,
	PRIMARY KEY (scope, subject)
) STRICT, WITHOUT ROWID;
CREATE TABLE spend (
	user_id TEXT NOT NULL,
	day     TEXT NOT NULL,                    -- 2006-01-02, UTC
	usd     REAL NOT NULL,
	PRIMARY KEY (user_id, day)
) STRICT, WITHOUT ROWID;
CREATE INDEX spend_day ON spend (day, user_id);
CREATE INDEX sessions_user_state ON sessions (user_id, state);
`},
	// Slack accounts waiting to be linked by hand (store/slack.go): the
	// SHA-256 of the code each was given, for a few minutes.
	{"slack_links", `
CREATE TABLE slack_links (
	hash       BLOB PRIMARY KEY,              -- SHA-256 of the code
	team       TEXT NOT NULL,
	slack_user TEXT NOT NULL,
	name       TEXT NOT NULL DEFAULT '',      -- the account's name in Slack
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX slack_links_expires ON slack_links (expires_at);
`},
	// A Slack thread's progress message and the message that asked, of
	// its last turn (store/slack.go, SetSlackThreadTurn): kept so that a
	// restart, or the node taking the session over, edits that message
	// and marks the right one.
	{"slack-turn", `
ALTER TABLE slack_threads ADD COLUMN turn TEXT NOT NULL DEFAULT '';
ALTER TABLE slack_threads ADD COLUMN progress_ts TEXT NOT NULL DEFAULT '';
ALTER TABLE slack_threads ADD COLUMN trigger_ts TEXT NOT NULL DEFAULT '';
`},
	// Slack events kept until done (store/slack_inbox.go): a pending
	// event's payload, processed again after a crash.
	{"slack_inbox", `
ALTER TABLE slack_events ADD COLUMN payload BLOB;                   -- the event while pending; NULL once done
CREATE INDEX slack_events_pending ON slack_events (received_at) WHERE payload IS NOT NULL;
`},
}

// migrate applies the migrations the database has not seen, all in one
// transaction: either the schema is brought fully up to date or it is left
// as it was.
func (s *Store) migrate(ctx context.Context) error {
	return s.write(ctx, "sqlite: migrate "+s.path, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT`); err != nil {
			return fmt.Errorf("sqlite: %s: creating schema_migrations: %w", s.path, err)
		}
		var have int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
			return fmt.Errorf("sqlite: %s: reading the schema version: %w", s.path, err)
		}
		if have > len(migrations) {
			return fmt.Errorf("sqlite: %s has schema version %d but this harvest knows only up to %d: it was written by a newer harvest; upgrade harvest", s.path, have, len(migrations))
		}
		// Every migration not recorded runs, in order (not only those after
		// the highest recorded: a repair can be recorded as not done).
		rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return fmt.Errorf("sqlite: %s: reading the applied migrations: %w", s.path, err)
		}
		done := map[int]bool{}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return fmt.Errorf("sqlite: %s: reading the applied migrations: %w", s.path, err)
			}
			done[v] = true
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: %s: reading the applied migrations: %w", s.path, err)
		}
		rows.Close()
		for v := 1; v <= len(migrations); v++ {
			if done[v] {
				continue
			}
			m := migrations[v-1]
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("sqlite: %s: migration %d (%s): %w", s.path, v, m.name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, v, m.name, ts(s.now())); err != nil {
				return fmt.Errorf("sqlite: %s: recording migration %d: %w", s.path, v, err)
			}
		}
		return nil
	})
}
