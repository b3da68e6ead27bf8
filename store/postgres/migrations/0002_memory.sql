-- The repositories' memory (store.Memory), as store/sqlite's "memory"
-- migration: entities per scope (repository, owner), their observations,
-- relations between two entities of a scope, and the scopes ever seeded.
-- An entity's observations and relations go with it (ON DELETE CASCADE).
-- Names, types and the scope are COLLATE "C": ordered by bytes as SQLite
-- orders them, and lower() folds ASCII only, as SQLite's does.
--
-- An observation's text has no unique index (a btree entry is capped at
-- about 2.7 kB, an observation is not): every memory write of a scope
-- holds the scope's advisory lock (memory.go), so "insert the texts the
-- entity lacks" is checked and done by one writer at a time.

CREATE TABLE memory_entities (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	repo       text COLLATE "C" NOT NULL,           -- store.MemoryScope: the repository's key
	owner      text COLLATE "C" NOT NULL DEFAULT '', -- a token id, '' for the repository's shared memory
	name       text COLLATE "C" NOT NULL,
	type       text COLLATE "C" NOT NULL,
	session    text NOT NULL DEFAULT '',            -- the write that created it
	turn       bigint NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL,
	UNIQUE (repo, owner, name)
);
CREATE INDEX memory_entities_owner ON memory_entities (owner);

CREATE TABLE memory_observations (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- orders an entity's observations
	entity     bigint NOT NULL REFERENCES memory_entities (id) ON DELETE CASCADE,
	text       text COLLATE "C" NOT NULL,
	session    text NOT NULL DEFAULT '',
	turn       bigint NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL
);
CREATE INDEX memory_observations_entity ON memory_observations (entity, id);

CREATE TABLE memory_relations (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	src        bigint NOT NULL REFERENCES memory_entities (id) ON DELETE CASCADE,
	dst        bigint NOT NULL REFERENCES memory_entities (id) ON DELETE CASCADE,
	type       text COLLATE "C" NOT NULL,
	session    text NOT NULL DEFAULT '',
	turn       bigint NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL,
	UNIQUE (src, dst, type)
);
CREATE INDEX memory_relations_dst ON memory_relations (dst);

CREATE TABLE memory_seeded (
	repo      text COLLATE "C" NOT NULL,
	owner     text COLLATE "C" NOT NULL DEFAULT '',
	seeded_at timestamptz NOT NULL,
	PRIMARY KEY (repo, owner)
);
CREATE INDEX memory_seeded_owner ON memory_seeded (owner);
