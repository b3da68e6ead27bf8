-- A node's heartbeat is the lease of every session it holds
-- (store/leases.go), as store/sqlite's "node-leases" migration: a lease is
-- an assignment (node, epoch, the node's generation) with no expiry of its
-- own, so keeping a node's sessions writes one row a round, not one per
-- session. A node reports how many it holds; moved counts the sessions
-- deleted under it. The takeover scan reads the sessions that may need a
-- node through a partial index (never the ended ones, which only grow).
ALTER TABLE nodes ADD COLUMN gen bigint NOT NULL DEFAULT 0;        -- its generation: its leases of another are over
ALTER TABLE nodes ADD COLUMN ended timestamptz;                    -- when its previous generation ended (NULL: none)
ALTER TABLE nodes ADD COLUMN moved bigint NOT NULL DEFAULT 0;      -- sessions deleted while it held them
ALTER TABLE nodes ADD COLUMN leases integer NOT NULL DEFAULT 0;    -- how many it holds, as it reported
ALTER TABLE session_leases ADD COLUMN gen bigint NOT NULL DEFAULT 0; -- its node's generation it was taken in
ALTER TABLE session_leases DROP COLUMN expires;
DROP INDEX session_leases_node;
CREATE INDEX session_leases_node ON session_leases (node, gen) WHERE node <> '';
CREATE INDEX sessions_needing_node ON sessions (created_at, id, state)
	WHERE state IN ('pending', 'provisioning', 'idle', 'working', 'waiting', 'cancelling', 'suspended');
