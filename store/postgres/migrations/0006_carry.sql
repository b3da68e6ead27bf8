-- Workspaces carried between nodes (store/carry.go): packs of file
-- contents, content-addressed, and each session's latest checkpoint with
-- the packs it references. A pack outlives the checkpoints that named it
-- until SweepPacks removes it.
CREATE TABLE workspace_packs (
	hash       text COLLATE "C" PRIMARY KEY,   -- hex SHA-256 of data
	data       bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT statement_timestamp()
);

CREATE TABLE workspace_checkpoints (
	session    text COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	instance   text NOT NULL,
	node       text NOT NULL,
	turn       text NOT NULL,
	manifest   bytea NOT NULL,
	bytes      bigint NOT NULL,
	files      integer NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE TABLE workspace_checkpoint_packs (
	session text COLLATE "C" NOT NULL REFERENCES workspace_checkpoints (session) ON DELETE CASCADE,
	hash    text COLLATE "C" NOT NULL REFERENCES workspace_packs (hash),
	PRIMARY KEY (session, hash)
);
CREATE INDEX workspace_checkpoint_packs_hash ON workspace_checkpoint_packs (hash);
