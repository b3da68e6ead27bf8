-- Workspace checkpoints' packs and manifests in an object store
-- (store/carry.go, package store/objstore), as store/sqlite's
-- "checkpoint-objects" migration: the rows keep a reference (the object's
-- key, size and sha256); data and manifest hold only what was stored
-- before ('' after), and are still read.
ALTER TABLE workspace_packs ADD COLUMN object text COLLATE "C" NOT NULL DEFAULT '';  -- its key in the checkpoint store, '' : data holds it
ALTER TABLE workspace_packs ADD COLUMN size bigint NOT NULL DEFAULT 0;               -- the object's size
ALTER TABLE workspace_checkpoints ADD COLUMN manifest_object text COLLATE "C" NOT NULL DEFAULT ''; -- '' : manifest holds it
ALTER TABLE workspace_checkpoints ADD COLUMN manifest_size bigint NOT NULL DEFAULT 0;
ALTER TABLE workspace_checkpoints ADD COLUMN manifest_sha256 text NOT NULL DEFAULT '';
CREATE INDEX workspace_packs_object ON workspace_packs (object) WHERE object <> '';
CREATE INDEX workspace_checkpoints_manifest_object ON workspace_checkpoints (manifest_object) WHERE manifest_object <> '';
