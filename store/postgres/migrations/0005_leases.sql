-- Nodes sharing the database and their sessions' leases (store/leases.go).
-- A released lease keeps its row and its epoch (node ''), so a session's
-- epochs never go back. Leases are not tied to nodes' rows: a node that
-- is forgotten keeps its leases until they expire.
CREATE TABLE nodes (
	id        text COLLATE "C" PRIMARY KEY,
	addr      text NOT NULL DEFAULT '',
	capacity  integer NOT NULL DEFAULT 0,   -- max sessions, 0 for no bound
	heartbeat timestamptz NOT NULL,         -- the last one (the server's clock)
	expires   timestamptz NOT NULL          -- live until then
);

CREATE TABLE session_leases (
	session text COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	node    text COLLATE "C" NOT NULL,      -- the holder, '' once released
	epoch   bigint NOT NULL,                -- 1, 2, ...: one more at every change of hands
	expires timestamptz NOT NULL
);
CREATE INDEX session_leases_node ON session_leases (node) WHERE node <> '';
