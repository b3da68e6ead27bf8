-- GET /v1/sessions pages by keyset on (created_at, id), newest first; a
-- token that is not an admin's lists its own sessions only, so its pages
-- seek this index instead of sorting all of its sessions for each page.
-- It replaces sessions_owner (owner, created_at DESC), which it covers.
CREATE INDEX sessions_owner_created ON sessions (owner, created_at DESC, id DESC);
DROP INDEX sessions_owner;
