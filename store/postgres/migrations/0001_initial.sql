-- The schema of store/sqlite's nine migrations, as one. Times are
-- timestamptz (microseconds, UTC); NULL is the zero time.Time. JSON that
-- ListSessions filters on is jsonb; event payloads are bytea, kept as the
-- journal encoded them. Text that orders results (ids, secrets' scopes
-- and names) is COLLATE "C": by bytes, as SQLite orders, whatever the
-- database's locale.

CREATE TABLE sessions (
	sid         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- the events' compact key
	id          text COLLATE "C" NOT NULL UNIQUE,
	owner       text NOT NULL,
	title       text NOT NULL DEFAULT '',
	state       text NOT NULL,
	agent       text NOT NULL DEFAULT '',
	model       text NOT NULL DEFAULT '',
	backend     text NOT NULL DEFAULT '',
	mode        text NOT NULL DEFAULT '',
	repos       jsonb NOT NULL DEFAULT 'null',  -- []store.Repo
	limits      jsonb NOT NULL DEFAULT '{}',    -- store.Limits
	sandbox     bytea,
	agent_state bytea,
	turns       bigint NOT NULL DEFAULT 0,
	usage       jsonb NOT NULL DEFAULT '{}',    -- event.Usage
	cost_usd    double precision NOT NULL DEFAULT 0,
	error       text NOT NULL DEFAULT '',
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	active_at   timestamptz,
	collab      jsonb NOT NULL DEFAULT '{}',    -- store.Collab
	terminal    jsonb,                          -- store.TerminalCLI, NULL for none
	egress      jsonb,                          -- array of hosts, NULL for the server's allowlist
	pr          text NOT NULL DEFAULT '',
	github      jsonb,                          -- store.GitHubLink, NULL for none
	environment text NOT NULL DEFAULT ''
);
CREATE INDEX sessions_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_owner ON sessions (owner, created_at DESC);
CREATE INDEX sessions_state ON sessions (state);
CREATE INDEX sessions_updated ON sessions (updated_at);
CREATE INDEX sessions_workflow ON sessions ((collab->>'workflow')) WHERE collab <> '{}';
CREATE INDEX sessions_github ON sessions (lower(github->>'repo'), ((github->>'number')::bigint)) WHERE github IS NOT NULL;

CREATE TABLE messages (
	session      text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq          bigint NOT NULL,
	id           text NOT NULL,
	text         text NOT NULL,
	mode         text NOT NULL DEFAULT '',
	state        text NOT NULL,
	turn         text NOT NULL DEFAULT '',
	created_at   timestamptz NOT NULL,
	delivered_at timestamptz,
	key_owner    text NOT NULL DEFAULT '',  -- the API token that sent it with idem_key
	idem_key     text NOT NULL DEFAULT '',  -- its Idempotency-Key, '' for none
	request_hash bytea,                     -- what was sent with the key
	PRIMARY KEY (session, seq),
	UNIQUE (session, id)
);
CREATE UNIQUE INDEX messages_idem_key ON messages (session, key_owner, idem_key) WHERE idem_key <> '';

CREATE TABLE events (
	sid   bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
	seq   bigint NOT NULL,
	type  text NOT NULL,
	time  timestamptz,
	turn  text NOT NULL DEFAULT '',
	agent text NOT NULL DEFAULT '',
	repo  text NOT NULL DEFAULT '',
	data  bytea NOT NULL,                   -- the JSON payload, as encoded
	PRIMARY KEY (sid, seq)
);

CREATE TABLE locks (
	key     text PRIMARY KEY,
	holder  text NOT NULL,
	expires timestamptz NOT NULL
);

CREATE TABLE tokens (
	id         text COLLATE "C" PRIMARY KEY,
	name       text NOT NULL,
	hash       bytea NOT NULL UNIQUE,       -- SHA-256 of the secret
	admin      boolean NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE TABLE deliveries (
	id          text COLLATE "C" PRIMARY KEY,          -- X-GitHub-Delivery
	event       text NOT NULL,
	payload     bytea NOT NULL,
	received_at timestamptz NOT NULL,
	state       text NOT NULL,              -- store.DeliveryPending|Done|Failed
	attempts    bigint NOT NULL DEFAULT 0,
	result      text NOT NULL DEFAULT '',
	done_at     timestamptz
);
CREATE INDEX deliveries_pending ON deliveries (received_at) WHERE state = 'pending';

CREATE TABLE environments (
	id          text COLLATE "C" PRIMARY KEY,
	repo        text NOT NULL,
	name        text NOT NULL,
	ref         text NOT NULL DEFAULT '',
	commit_sha  text NOT NULL DEFAULT '',
	fingerprint text NOT NULL,
	backend     text NOT NULL,
	state       text NOT NULL,              -- store.EnvBuilding|Ready|Failed|Removed
	detected    jsonb NOT NULL DEFAULT '[]', -- []string
	error       text NOT NULL DEFAULT '',
	size_bytes  bigint NOT NULL DEFAULT 0,
	created_at  timestamptz NOT NULL,
	built_at    timestamptz
);
CREATE INDEX environments_repo ON environments (repo, backend, created_at);

CREATE TABLE secrets (
	scope      text COLLATE "C" NOT NULL,   -- repo:owner/name (lower case) | user:<token id>
	name       text COLLATE "C" NOT NULL,   -- an environment variable's name
	ciphertext bytea NOT NULL,              -- sealed by package secrets; never a value in clear
	key_id     text NOT NULL,
	session    boolean NOT NULL DEFAULT false,
	set_by     text NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (scope, name)
);
