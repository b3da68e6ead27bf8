-- One live session per repository branch (store/branches.go). The live
-- sessions of before get their claims, the oldest first: of two on one
-- branch (the bug this fixes), the younger holds nothing.
CREATE TABLE branch_claims (
	repo    text COLLATE "C" NOT NULL,  -- owner/name, lower case
	branch  text COLLATE "C" NOT NULL,
	session text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	PRIMARY KEY (repo, branch)
);
CREATE INDEX branch_claims_session ON branch_claims (session);
INSERT INTO branch_claims (repo, branch, session)
SELECT DISTINCT ON (lower(r->>'github'), r->>'branch') lower(r->>'github'), r->>'branch', s.id
FROM sessions s, jsonb_array_elements(CASE WHEN jsonb_typeof(s.repos) = 'array' THEN s.repos ELSE '[]'::jsonb END) r
WHERE s.state NOT IN ('stopped', 'failed')
	AND COALESCE(r->>'github', '') <> '' AND COALESCE(r->>'branch', '') <> ''
ORDER BY lower(r->>'github'), r->>'branch', s.created_at, s.id
ON CONFLICT DO NOTHING;
