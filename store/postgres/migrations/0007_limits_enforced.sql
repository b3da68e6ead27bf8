-- Which of a session's limits its box is held to (store.Enforcement, JSON),
-- NULL before its first box.
ALTER TABLE sessions ADD COLUMN limits_enforced jsonb;
