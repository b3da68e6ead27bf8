package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

// The repositories' memory (store.Memory): the tables of migration 0002,
// as store/sqlite's. Every write of a scope first takes the scope's
// transaction-scoped advisory lock (lockScope), so the writes of one scope
// run one at a time and the rest wait:
//
//   - A write's size bound (MemoryWrite.MaxBytes) is summed inside its
//     transaction after its rows are in, with the lock held: two writers
//     racing on one scope cannot both pass it, as the second sums after
//     the first committed (READ COMMITTED: each statement a new snapshot).
//   - "Add the observations the entity lacks" is a check and an insert
//     (an observation's text has no unique index: a btree entry is capped
//     near 2.7 kB), made safe by the same lock.
//   - SeedMemory's "never seeded and empty" holds until it commits.
//
// Search folds ASCII case only, as SQLite's lower() does: the columns are
// COLLATE "C" and the searched text is made so too. Sizes are bytes
// (octet_length, in the database's encoding: UTF-8 gives SQLite's).

// memoryLockSpace is the first key of pg_advisory_xact_lock(int, int) for
// memory scopes (the bytes of "mem!"); the second is scopeKey. The
// two-key space does not overlap the one-key space of migrateLockID.
const memoryLockSpace int32 = 0x6d656d21

// scopeKey hashes a scope to the lock's second key. Two scopes with one
// key only wait for each other.
func scopeKey(sc store.MemoryScope) int32 {
	h := fnv.New32a()
	h.Write([]byte(sc.Repo))
	h.Write([]byte{0})
	h.Write([]byte(sc.Owner))
	return int32(h.Sum32())
}

type memQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func scopeName(sc store.MemoryScope) string {
	if sc.Owner == "" {
		return sc.Repo
	}
	return sc.Repo + " (owner " + sc.Owner + ")"
}

func checkScope(what string, sc store.MemoryScope) error {
	if sc.Repo == "" {
		return fmt.Errorf("postgres: %s: the memory scope has no repository", what)
	}
	return nil
}

// memWrite runs fn in a write transaction that holds sc's lock. fn may run
// more than once (Store.write retries): it must reset what it returns.
func (s *Store) memWrite(ctx context.Context, what string, sc store.MemoryScope, fn func(tx pgx.Tx) error) error {
	return s.write(ctx, what, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, memoryLockSpace, scopeKey(sc)); err != nil {
			return fmt.Errorf("postgres: %s: locking the scope: %w", what, err)
		}
		return fn(tx)
	})
}

// memorySize sums a scope's bytes (see store.Memory.MemorySize).
func memorySize(ctx context.Context, q memQuerier, sc store.MemoryScope) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT
	COALESCE((SELECT SUM(octet_length(name) + octet_length(type)) FROM memory_entities WHERE repo = $1 AND owner = $2), 0)
	+ COALESCE((SELECT SUM(octet_length(o.text)) FROM memory_observations o JOIN memory_entities e ON e.id = o.entity WHERE e.repo = $1 AND e.owner = $2), 0)
	+ COALESCE((SELECT SUM(octet_length(r.type)) FROM memory_relations r JOIN memory_entities e ON e.id = r.src WHERE e.repo = $1 AND e.owner = $2), 0)`,
		sc.Repo, sc.Owner).Scan(&n)
	return n, err
}

// bound fails a write that left its scope over w.MaxBytes.
func bound(ctx context.Context, tx pgx.Tx, sc store.MemoryScope, w store.MemoryWrite) error {
	if w.MaxBytes <= 0 {
		return nil
	}
	n, err := memorySize(ctx, tx, sc)
	if err != nil {
		return fmt.Errorf("postgres: memory %s: its size: %w", scopeName(sc), err)
	}
	if n > w.MaxBytes {
		return fmt.Errorf("memory %s would hold %d bytes, over its bound of %d: %w", scopeName(sc), n, w.MaxBytes, store.ErrMemoryFull)
	}
	return nil
}

func entityID(ctx context.Context, q memQuerier, sc store.MemoryScope, name string) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `SELECT id FROM memory_entities WHERE repo = $1 AND owner = $2 AND name = $3`, sc.Repo, sc.Owner, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("memory %s has no entity %q: %w", scopeName(sc), name, store.ErrNotFound)
	}
	return id, err
}

// addObservations inserts the texts the entity lacks, in order, and
// returns them. The caller holds the scope's lock.
func (s *Store) addObservations(ctx context.Context, tx pgx.Tx, id int64, texts []string, w store.MemoryWrite) ([]*store.MemoryObservation, error) {
	now := s.now()
	var out []*store.MemoryObservation
	for _, t := range texts {
		tag, err := tx.Exec(ctx, `INSERT INTO memory_observations (entity, text, session, turn, created_at)
SELECT $1::bigint, $2::text, $3::text, $4::bigint, $5::timestamptz
WHERE NOT EXISTS (SELECT 1 FROM memory_observations WHERE entity = $1::bigint AND text = $2::text)`, id, t, w.Session, w.Turn, now)
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() > 0 {
			out = append(out, &store.MemoryObservation{Text: t, Session: w.Session, Turn: w.Turn, CreatedAt: now})
		}
	}
	return out, nil
}

func (s *Store) createEntities(ctx context.Context, tx pgx.Tx, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) ([]*store.MemoryEntity, error) {
	now := s.now()
	var out []*store.MemoryEntity
	for _, e := range es {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (repo, owner, name) DO NOTHING RETURNING id`, sc.Repo, sc.Owner, e.Name, e.Type, w.Session, w.Turn, now).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the scope has it
		}
		if err != nil {
			return nil, fmt.Errorf("postgres: memory %s: creating entity %q: %w", scopeName(sc), e.Name, err)
		}
		texts := make([]string, 0, len(e.Observations))
		for _, o := range e.Observations {
			texts = append(texts, o.Text)
		}
		obs, err := s.addObservations(ctx, tx, id, texts, w)
		if err != nil {
			return nil, fmt.Errorf("postgres: memory %s: observations of %q: %w", scopeName(sc), e.Name, err)
		}
		out = append(out, &store.MemoryEntity{Name: e.Name, Type: e.Type, Observations: obs, Session: w.Session, Turn: w.Turn, CreatedAt: now})
	}
	return out, nil
}

// CreateMemoryEntities adds the entities the scope lacks.
func (s *Store) CreateMemoryEntities(ctx context.Context, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) ([]*store.MemoryEntity, error) {
	what := "create memory entities in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []*store.MemoryEntity
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		var err error
		if out, err = s.createEntities(ctx, tx, sc, es, w); err != nil {
			return err
		}
		return bound(ctx, tx, sc, w)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AddMemoryObservations adds the texts the entity lacks.
func (s *Store) AddMemoryObservations(ctx context.Context, sc store.MemoryScope, entity string, texts []string, w store.MemoryWrite) ([]string, error) {
	what := "add memory observations to " + entity + " in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []string
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		out = nil
		id, err := entityID(ctx, tx, sc, entity)
		if errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		obs, err := s.addObservations(ctx, tx, id, texts, w)
		if err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		for _, o := range obs {
			out = append(out, o.Text)
		}
		return bound(ctx, tx, sc, w)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetMemoryEntity makes an entity be exactly (typ, texts): the
// observations it keeps keep their provenance and order, the new ones
// follow in texts' order. It returns the entity as stored, read in the
// same transaction.
func (s *Store) SetMemoryEntity(ctx context.Context, sc store.MemoryScope, name, typ string, texts []string, w store.MemoryWrite) (*store.MemoryEntity, error) {
	what := "set memory entity " + name + " in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	if texts == nil {
		texts = []string{} // NULL would keep every observation below
	}
	var out *store.MemoryEntity
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		id, err := entityID(ctx, tx, sc, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = tx.QueryRow(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
				sc.Repo, sc.Owner, name, typ, w.Session, w.Turn, s.now()).Scan(&id)
		case err == nil:
			_, err = tx.Exec(ctx, `UPDATE memory_entities SET type = $1 WHERE id = $2`, typ, id)
		}
		if err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM memory_observations WHERE entity = $1 AND NOT (text = ANY($2::text[]))`, id, texts); err != nil {
			return fmt.Errorf("postgres: %s: dropping observations: %w", what, err)
		}
		if _, err := s.addObservations(ctx, tx, id, texts, w); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		if err := bound(ctx, tx, sc, w); err != nil {
			return err
		}
		g, err := readMemory(ctx, tx, sc, store.MemoryQuery{Names: []string{name}})
		if err != nil {
			return fmt.Errorf("postgres: %s: reading it back: %w", what, err)
		}
		if len(g.Entities) != 1 {
			return fmt.Errorf("postgres: %s: it is not there after the write", what)
		}
		out = g.Entities[0]
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CreateMemoryRelations adds the relations the scope lacks; one whose end
// is missing writes nothing.
func (s *Store) CreateMemoryRelations(ctx context.Context, sc store.MemoryScope, rs []*store.MemoryRelation, w store.MemoryWrite) ([]*store.MemoryRelation, error) {
	what := "create memory relations in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []*store.MemoryRelation
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		out = nil
		now := s.now()
		for _, r := range rs {
			src, err := entityID(ctx, tx, sc, r.From)
			if err != nil {
				return fmt.Errorf("relation %s -%s-> %s: %w", r.From, r.Type, r.To, err)
			}
			dst, err := entityID(ctx, tx, sc, r.To)
			if err != nil {
				return fmt.Errorf("relation %s -%s-> %s: %w", r.From, r.Type, r.To, err)
			}
			tag, err := tx.Exec(ctx, `INSERT INTO memory_relations (src, dst, type, session, turn, created_at) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (src, dst, type) DO NOTHING`, src, dst, r.Type, w.Session, w.Turn, now)
			if err != nil {
				return fmt.Errorf("postgres: %s: %w", what, err)
			}
			if tag.RowsAffected() > 0 {
				out = append(out, &store.MemoryRelation{From: r.From, To: r.To, Type: r.Type, Session: w.Session, Turn: w.Turn, CreatedAt: now})
			}
		}
		return bound(ctx, tx, sc, w)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteMemoryEntities removes entities with what hangs on them.
func (s *Store) DeleteMemoryEntities(ctx context.Context, sc store.MemoryScope, names []string) (int, error) {
	what := "delete memory entities in " + scopeName(sc)
	n := 0
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM memory_entities WHERE repo = $1 AND owner = $2 AND name = ANY($3::text[])`, sc.Repo, sc.Owner, names)
		if err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		n = int(tag.RowsAffected())
		return nil
	})
	return n, err
}

// DeleteMemoryObservations removes texts from an entity (none when the
// entity is missing).
func (s *Store) DeleteMemoryObservations(ctx context.Context, sc store.MemoryScope, entity string, texts []string) (int, error) {
	what := "delete memory observations of " + entity + " in " + scopeName(sc)
	n := 0
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM memory_observations WHERE text = ANY($4::text[])
	AND entity = (SELECT id FROM memory_entities WHERE repo = $1 AND owner = $2 AND name = $3)`, sc.Repo, sc.Owner, entity, texts)
		if err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		n = int(tag.RowsAffected())
		return nil
	})
	return n, err
}

// DeleteMemoryRelations removes relations.
func (s *Store) DeleteMemoryRelations(ctx context.Context, sc store.MemoryScope, rs []*store.MemoryRelation) (int, error) {
	what := "delete memory relations in " + scopeName(sc)
	n := 0
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		n = 0
		for _, r := range rs {
			tag, err := tx.Exec(ctx, `DELETE FROM memory_relations WHERE type = $5
	AND src = (SELECT id FROM memory_entities WHERE repo = $1 AND owner = $2 AND name = $3)
	AND dst = (SELECT id FROM memory_entities WHERE repo = $1 AND owner = $2 AND name = $4)`,
				sc.Repo, sc.Owner, r.From, r.To, r.Type)
			if err != nil {
				return fmt.Errorf("postgres: %s: %w", what, err)
			}
			n += int(tag.RowsAffected())
		}
		return nil
	})
	return n, err
}

// ReadMemory reads part of a scope's graph in one REPEATABLE READ
// transaction, so its three queries see one state.
func (s *Store) ReadMemory(ctx context.Context, sc store.MemoryScope, q store.MemoryQuery) (*store.MemoryGraph, error) {
	what := "read memory " + scopeName(sc)
	if q.Names != nil && len(q.Names) == 0 {
		return &store.MemoryGraph{Entities: []*store.MemoryEntity{}, Relations: []*store.MemoryRelation{}}, nil
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: begin: %w", what, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	g, err := readMemory(ctx, tx, sc, q)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	return g, nil
}

// readMemory selects the entities, then their observations, then the
// relations between two of them.
func readMemory(ctx context.Context, tx pgx.Tx, sc store.MemoryScope, q store.MemoryQuery) (*store.MemoryGraph, error) {
	g := &store.MemoryGraph{Entities: []*store.MemoryEntity{}, Relations: []*store.MemoryRelation{}}
	query := `SELECT id, name, type, session, turn, created_at FROM memory_entities e WHERE repo = $1 AND owner = $2`
	args := []any{sc.Repo, sc.Owner}
	if q.Search != "" {
		args = append(args, q.Search)
		p := fmt.Sprintf(`lower($%d::text COLLATE "C")`, len(args))
		query += ` AND (strpos(lower(name), ` + p + `) > 0 OR strpos(lower(type), ` + p + `) > 0
	OR EXISTS (SELECT 1 FROM memory_observations o WHERE o.entity = e.id AND strpos(lower(o.text), ` + p + `) > 0))`
	}
	if q.Names != nil {
		args = append(args, q.Names)
		query += fmt.Sprintf(` AND name = ANY($%d::text[])`, len(args))
	}
	rows, err := tx.Query(ctx, query+` ORDER BY name`, args...)
	if err != nil {
		return nil, err
	}
	byID := map[int64]*store.MemoryEntity{}
	var ids []int64
	for rows.Next() {
		var (
			id int64
			e  store.MemoryEntity
		)
		if err := rows.Scan(&id, &e.Name, &e.Type, &e.Session, &e.Turn, &e.CreatedAt); err != nil {
			rows.Close()
			return nil, err
		}
		e.CreatedAt = e.CreatedAt.UTC()
		e.Observations = []*store.MemoryObservation{}
		byID[id] = &e
		ids = append(ids, id)
		g.Entities = append(g.Entities, &e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return g, nil
	}
	rows, err = tx.Query(ctx, `SELECT entity, text, session, turn, created_at FROM memory_observations WHERE entity = ANY($1::bigint[]) ORDER BY id`, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var (
			id int64
			o  store.MemoryObservation
		)
		if err := rows.Scan(&id, &o.Text, &o.Session, &o.Turn, &o.CreatedAt); err != nil {
			rows.Close()
			return nil, err
		}
		o.CreatedAt = o.CreatedAt.UTC()
		byID[id].Observations = append(byID[id].Observations, &o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT a.name, b.name, r.type, r.session, r.turn, r.created_at FROM memory_relations r
	JOIN memory_entities a ON a.id = r.src JOIN memory_entities b ON b.id = r.dst
	WHERE r.src = ANY($1::bigint[]) AND r.dst = ANY($1::bigint[]) ORDER BY a.name, b.name, r.type`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r store.MemoryRelation
		if err := rows.Scan(&r.From, &r.To, &r.Type, &r.Session, &r.Turn, &r.CreatedAt); err != nil {
			return nil, err
		}
		r.CreatedAt = r.CreatedAt.UTC()
		g.Relations = append(g.Relations, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return g, nil
}

// MemorySize is a scope's size in bytes.
func (s *Store) MemorySize(ctx context.Context, sc store.MemoryScope) (int64, error) {
	n, err := memorySize(ctx, s.pool, sc)
	if err != nil {
		return 0, fmt.Errorf("postgres: the size of memory %s: %w", scopeName(sc), err)
	}
	return n, nil
}

// SeedMemory seeds a scope never seeded and empty; the scope's lock makes
// concurrent seeders queue, and each after the first finds it seeded.
func (s *Store) SeedMemory(ctx context.Context, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) (bool, error) {
	what := "seed memory " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return false, err
	}
	seeded := false
	err := s.memWrite(ctx, what, sc, func(tx pgx.Tx) error {
		seeded = false
		var had bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM memory_seeded WHERE repo = $1 AND owner = $2)
	OR EXISTS (SELECT 1 FROM memory_entities WHERE repo = $1 AND owner = $2)`, sc.Repo, sc.Owner).Scan(&had); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		if had {
			return nil
		}
		if _, err := s.createEntities(ctx, tx, sc, es, w); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO memory_seeded (repo, owner, seeded_at) VALUES ($1, $2, $3)`, sc.Repo, sc.Owner, s.now()); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		seeded = true
		return bound(ctx, tx, sc, w)
	})
	return seeded && err == nil, err
}
