package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// The repositories' memory (store.Memory): three tables (entities, their
// observations, relations between two entities of one scope) whose rows
// carry the session and turn that wrote them. An entity's observations and
// relations go with it (ON DELETE CASCADE).
//
// Every write of a scope runs with the scope's lock (memWrite: on
// PostgreSQL a transaction-scoped advisory lock, Dialect.ScopeLock; on
// SQLite the one writer), so the writes of one scope run one at a time:
//
//   - A write's size bound (MemoryWrite.MaxBytes) is summed inside its
//     transaction after its rows are in, with the lock held: two writers
//     racing on one scope cannot both pass it, as the second sums after
//     the first committed (READ COMMITTED: each statement a new snapshot).
//   - "Add the observations the entity lacks" is a check and an insert
//     (PostgreSQL has no unique index on an observation's text: a btree
//     entry is capped near 2.7 kB; SQLite's UNIQUE (entity, text) is a
//     backstop), made safe by the same lock.
//   - SeedMemory's "never seeded and empty" holds until it commits.
//
// Search folds ASCII case only (Dialect.Contains). Sizes are bytes
// (octet_length, in the database's encoding: UTF-8 in both).

// memoryLockSpace is the first key of the scope lock for memory scopes
// (the bytes of "mem!"); the second is scopeKey. On PostgreSQL, the
// two-key space does not overlap the one-key space of its migrations'
// lock.
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

func scopeName(sc store.MemoryScope) string {
	if sc.Owner == "" {
		return sc.Repo
	}
	return sc.Repo + " (owner " + sc.Owner + ")"
}

func (s *Store) checkScope(what string, sc store.MemoryScope) error {
	if sc.Repo == "" {
		return s.errorf("%s: the memory scope has no repository", what)
	}
	return nil
}

// memWrite runs fn in a write transaction that holds sc's lock. fn may run
// more than once (PostgreSQL's writes are retried): it must reset what it
// returns.
func (s *Store) memWrite(ctx context.Context, what string, sc store.MemoryScope, fn func(tx Querier) error) error {
	return s.write(ctx, what, func(tx Querier) error {
		if q, args := s.d.ScopeLock(memoryLockSpace, scopeKey(sc)); q != "" {
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return s.errorf("%s: locking the scope: %w", what, err)
			}
		}
		return fn(tx)
	})
}

// memorySize sums a scope's bytes (see store.Memory.MemorySize).
func memorySize(ctx context.Context, q Querier, sc store.MemoryScope) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT
	COALESCE((SELECT SUM(octet_length(name) + octet_length(type)) FROM memory_entities WHERE repo = ? AND owner = ?), 0)
	+ COALESCE((SELECT SUM(octet_length(o.text)) FROM memory_observations o JOIN memory_entities e ON e.id = o.entity WHERE e.repo = ? AND e.owner = ?), 0)
	+ COALESCE((SELECT SUM(octet_length(r.type)) FROM memory_relations r JOIN memory_entities e ON e.id = r.src WHERE e.repo = ? AND e.owner = ?), 0)`,
		sc.Repo, sc.Owner, sc.Repo, sc.Owner, sc.Repo, sc.Owner).Scan(&n)
	return n, err
}

// bound fails a write that left its scope over w.MaxBytes.
func (s *Store) bound(ctx context.Context, tx Querier, sc store.MemoryScope, w store.MemoryWrite) error {
	if w.MaxBytes <= 0 {
		return nil
	}
	n, err := memorySize(ctx, tx, sc)
	if err != nil {
		return s.errorf("memory %s: its size: %w", scopeName(sc), err)
	}
	if n > w.MaxBytes {
		return fmt.Errorf("memory %s would hold %d bytes, over its bound of %d: %w", scopeName(sc), n, w.MaxBytes, store.ErrMemoryFull)
	}
	return nil
}

func entityID(ctx context.Context, q Querier, sc store.MemoryScope, name string) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `SELECT id FROM memory_entities WHERE repo = ? AND owner = ? AND name = ?`, sc.Repo, sc.Owner, name).Scan(&id)
	if isNoRows(err) {
		return 0, fmt.Errorf("memory %s has no entity %q: %w", scopeName(sc), name, store.ErrNotFound)
	}
	return id, err
}

// addObservations inserts the texts the entity lacks, in order, and
// returns them. The caller holds the scope's lock.
func (s *Store) addObservations(ctx context.Context, tx Querier, id int64, texts []string, w store.MemoryWrite, now time.Time) ([]*store.MemoryObservation, error) {
	var out []*store.MemoryObservation
	for _, t := range texts {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM memory_observations WHERE entity = ? AND text = ?`, id, t).Scan(&one)
		if err == nil {
			continue // the entity has it
		}
		if !isNoRows(err) {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO memory_observations (entity, text, session, turn, created_at) VALUES (?, ?, ?, ?, ?)`,
			id, t, w.Session, w.Turn, s.d.Time(now)); err != nil {
			return nil, err
		}
		out = append(out, &store.MemoryObservation{Text: t, Session: w.Session, Turn: w.Turn, CreatedAt: now})
	}
	return out, nil
}

func (s *Store) createEntities(ctx context.Context, tx Querier, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) ([]*store.MemoryEntity, error) {
	now := s.now()
	var out []*store.MemoryEntity
	for _, e := range es {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (repo, owner, name) DO NOTHING RETURNING id`, sc.Repo, sc.Owner, e.Name, e.Type, w.Session, w.Turn, s.d.Time(now)).Scan(&id)
		if isNoRows(err) {
			continue // the scope has it
		}
		if err != nil {
			return nil, s.errorf("memory %s: creating entity %q: %w", scopeName(sc), e.Name, err)
		}
		texts := make([]string, 0, len(e.Observations))
		for _, o := range e.Observations {
			texts = append(texts, o.Text)
		}
		obs, err := s.addObservations(ctx, tx, id, texts, w, now)
		if err != nil {
			return nil, s.errorf("memory %s: observations of %q: %w", scopeName(sc), e.Name, err)
		}
		out = append(out, &store.MemoryEntity{Name: e.Name, Type: e.Type, Observations: obs, Session: w.Session, Turn: w.Turn, CreatedAt: now})
	}
	return out, nil
}

// CreateMemoryEntities adds the entities the scope lacks.
func (s *Store) CreateMemoryEntities(ctx context.Context, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) ([]*store.MemoryEntity, error) {
	what := "create memory entities in " + scopeName(sc)
	if err := s.checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []*store.MemoryEntity
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
		var err error
		if out, err = s.createEntities(ctx, tx, sc, es, w); err != nil {
			return err
		}
		return s.bound(ctx, tx, sc, w)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AddMemoryObservations adds the texts the entity lacks.
func (s *Store) AddMemoryObservations(ctx context.Context, sc store.MemoryScope, entity string, texts []string, w store.MemoryWrite) ([]string, error) {
	what := "add memory observations to " + entity + " in " + scopeName(sc)
	if err := s.checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []string
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
		out = nil
		id, err := entityID(ctx, tx, sc, entity)
		if errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err != nil {
			return s.errorf("%s: %w", what, err)
		}
		obs, err := s.addObservations(ctx, tx, id, texts, w, s.now())
		if err != nil {
			return s.errorf("%s: %w", what, err)
		}
		for _, o := range obs {
			out = append(out, o.Text)
		}
		return s.bound(ctx, tx, sc, w)
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
	if err := s.checkScope(what, sc); err != nil {
		return nil, err
	}
	var out *store.MemoryEntity
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
		now := s.now()
		id, err := entityID(ctx, tx, sc, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = tx.QueryRow(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
				sc.Repo, sc.Owner, name, typ, w.Session, w.Turn, s.d.Time(now)).Scan(&id)
		case err == nil:
			_, err = tx.Exec(ctx, `UPDATE memory_entities SET type = ? WHERE id = ?`, typ, id)
		}
		if err != nil {
			return s.errorf("%s: %w", what, err)
		}
		drop, args := `DELETE FROM memory_observations WHERE entity = ?`, []any{id}
		if len(texts) > 0 {
			drop += ` AND text NOT IN ` + in(len(texts))
			args = appendStrings(args, texts)
		}
		if _, err := tx.Exec(ctx, drop, args...); err != nil {
			return s.errorf("%s: dropping observations: %w", what, err)
		}
		if _, err := s.addObservations(ctx, tx, id, texts, w, now); err != nil {
			return s.errorf("%s: %w", what, err)
		}
		if err := s.bound(ctx, tx, sc, w); err != nil {
			return err
		}
		g, err := s.readMemory(ctx, tx, sc, store.MemoryQuery{Names: []string{name}})
		if err != nil {
			return s.errorf("%s: reading it back: %w", what, err)
		}
		if len(g.Entities) != 1 {
			return s.errorf("%s: it is not there after the write", what)
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
	if err := s.checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []*store.MemoryRelation
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
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
			n, err := tx.Exec(ctx, `INSERT INTO memory_relations (src, dst, type, session, turn, created_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (src, dst, type) DO NOTHING`, src, dst, r.Type, w.Session, w.Turn, s.d.Time(now))
			if err != nil {
				return s.errorf("%s: %w", what, err)
			}
			if n > 0 {
				out = append(out, &store.MemoryRelation{From: r.From, To: r.To, Type: r.Type, Session: w.Session, Turn: w.Turn, CreatedAt: now})
			}
		}
		return s.bound(ctx, tx, sc, w)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteMemoryEntities removes entities with what hangs on them.
func (s *Store) DeleteMemoryEntities(ctx context.Context, sc store.MemoryScope, names []string) (int, error) {
	what := "delete memory entities in " + scopeName(sc)
	if len(names) == 0 {
		return 0, nil
	}
	var n int64
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
		var err error
		n, err = tx.Exec(ctx, `DELETE FROM memory_entities WHERE repo = ? AND owner = ? AND name IN `+in(len(names)),
			appendStrings([]any{sc.Repo, sc.Owner}, names)...)
		if err != nil {
			return s.errorf("%s: %w", what, err)
		}
		return nil
	})
	return int(n), err
}

// DeleteMemoryObservations removes texts from an entity (none when the
// entity is missing).
func (s *Store) DeleteMemoryObservations(ctx context.Context, sc store.MemoryScope, entity string, texts []string) (int, error) {
	what := "delete memory observations of " + entity + " in " + scopeName(sc)
	if len(texts) == 0 {
		return 0, nil
	}
	var n int64
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
		var err error
		n, err = tx.Exec(ctx, `DELETE FROM memory_observations WHERE text IN `+in(len(texts))+`
	AND entity = (SELECT id FROM memory_entities WHERE repo = ? AND owner = ? AND name = ?)`,
			append(appendStrings(nil, texts), sc.Repo, sc.Owner, entity)...)
		if err != nil {
			return s.errorf("%s: %w", what, err)
		}
		return nil
	})
	return int(n), err
}

// DeleteMemoryRelations removes relations.
func (s *Store) DeleteMemoryRelations(ctx context.Context, sc store.MemoryScope, rs []*store.MemoryRelation) (int, error) {
	what := "delete memory relations in " + scopeName(sc)
	n := 0
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
		n = 0
		for _, r := range rs {
			k, err := tx.Exec(ctx, `DELETE FROM memory_relations WHERE type = ?
	AND src = (SELECT id FROM memory_entities WHERE repo = ? AND owner = ? AND name = ?)
	AND dst = (SELECT id FROM memory_entities WHERE repo = ? AND owner = ? AND name = ?)`,
				r.Type, sc.Repo, sc.Owner, r.From, sc.Repo, sc.Owner, r.To)
			if err != nil {
				return s.errorf("%s: %w", what, err)
			}
			n += int(k)
		}
		return nil
	})
	return n, err
}

// ReadMemory reads part of a scope's graph in one snapshot (DB.Snapshot),
// so its three queries see one state.
func (s *Store) ReadMemory(ctx context.Context, sc store.MemoryScope, q store.MemoryQuery) (*store.MemoryGraph, error) {
	what := "read memory " + scopeName(sc)
	if q.Names != nil && len(q.Names) == 0 {
		return &store.MemoryGraph{Entities: []*store.MemoryEntity{}, Relations: []*store.MemoryRelation{}}, nil
	}
	var g *store.MemoryGraph
	err := s.db.Snapshot(ctx, what, func(tx Querier) error {
		var err error
		if g, err = s.readMemory(ctx, tx, sc, q); err != nil {
			return s.errorf("%s: %w", what, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// readMemory selects the entities, then their observations, then the
// relations between two of them (the entities' query again, as a
// subquery, says which).
func (s *Store) readMemory(ctx context.Context, tx Querier, sc store.MemoryScope, q store.MemoryQuery) (*store.MemoryGraph, error) {
	g := &store.MemoryGraph{Entities: []*store.MemoryEntity{}, Relations: []*store.MemoryRelation{}}
	where := `e.repo = ? AND e.owner = ?`
	args := []any{sc.Repo, sc.Owner}
	if q.Search != "" {
		where += ` AND (` + s.d.Contains("e.name") + ` OR ` + s.d.Contains("e.type") + `
	OR EXISTS (SELECT 1 FROM memory_observations o WHERE o.entity = e.id AND ` + s.d.Contains("o.text") + `))`
		args = append(args, q.Search, q.Search, q.Search)
	}
	if q.Names != nil {
		where += ` AND e.name IN ` + in(len(q.Names))
		args = appendStrings(args, q.Names)
	}
	selected := `SELECT e.id FROM memory_entities e WHERE ` + where
	rows, err := tx.Query(ctx, `SELECT e.id, e.name, e.type, e.session, e.turn, e.created_at FROM memory_entities e WHERE `+where+` ORDER BY e.name`, args...)
	if err != nil {
		return nil, err
	}
	byID := map[int64]*store.MemoryEntity{}
	for rows.Next() {
		var (
			id      int64
			e       store.MemoryEntity
			created Time
		)
		if err := rows.Scan(&id, &e.Name, &e.Type, &e.Session, &e.Turn, &created); err != nil {
			rows.Close()
			return nil, err
		}
		e.CreatedAt = created.T
		e.Observations = []*store.MemoryObservation{}
		byID[id] = &e
		g.Entities = append(g.Entities, &e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(g.Entities) == 0 {
		return g, nil
	}
	rows, err = tx.Query(ctx, `SELECT entity, text, session, turn, created_at FROM memory_observations WHERE entity IN (`+selected+`) ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var (
			id      int64
			o       store.MemoryObservation
			created Time
		)
		if err := rows.Scan(&id, &o.Text, &o.Session, &o.Turn, &created); err != nil {
			rows.Close()
			return nil, err
		}
		o.CreatedAt = created.T
		if e := byID[id]; e != nil {
			e.Observations = append(e.Observations, &o)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT r.src, r.dst, a.name, b.name, r.type, r.session, r.turn, r.created_at FROM memory_relations r
	JOIN memory_entities a ON a.id = r.src JOIN memory_entities b ON b.id = r.dst
	WHERE r.src IN (`+selected+`) AND r.dst IN (`+selected+`) ORDER BY a.name, b.name, r.type`, append(append([]any{}, args...), args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			src, dst int64
			r        store.MemoryRelation
			created  Time
		)
		if err := rows.Scan(&src, &dst, &r.From, &r.To, &r.Type, &r.Session, &r.Turn, &created); err != nil {
			return nil, err
		}
		r.CreatedAt = created.T
		if byID[src] != nil && byID[dst] != nil {
			g.Relations = append(g.Relations, &r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return g, nil
}

// MemorySize is a scope's size in bytes.
func (s *Store) MemorySize(ctx context.Context, sc store.MemoryScope) (int64, error) {
	n, err := memorySize(ctx, s.reader(), sc)
	if err != nil {
		return 0, s.errorf("the size of memory %s: %w", scopeName(sc), err)
	}
	return n, nil
}

// SeedMemory seeds a scope never seeded and empty; the scope's lock makes
// concurrent seeders queue, and each after the first finds it seeded.
func (s *Store) SeedMemory(ctx context.Context, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) (bool, error) {
	what := "seed memory " + scopeName(sc)
	if err := s.checkScope(what, sc); err != nil {
		return false, err
	}
	seeded := false
	err := s.memWrite(ctx, what, sc, func(tx Querier) error {
		seeded = false
		var had bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM memory_seeded WHERE repo = ? AND owner = ?)
	OR EXISTS (SELECT 1 FROM memory_entities WHERE repo = ? AND owner = ?)`, sc.Repo, sc.Owner, sc.Repo, sc.Owner).Scan(&had); err != nil {
			return s.errorf("%s: %w", what, err)
		}
		if had {
			return nil
		}
		if _, err := s.createEntities(ctx, tx, sc, es, w); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO memory_seeded (repo, owner, seeded_at) VALUES (?, ?, ?)`, sc.Repo, sc.Owner, s.d.Time(s.now())); err != nil {
			return s.errorf("%s: %w", what, err)
		}
		seeded = true
		return s.bound(ctx, tx, sc, w)
	})
	return seeded && err == nil, err
}

// LoadMemory stores a scope's graph as it is (store.Copier).
func (s *Store) LoadMemory(ctx context.Context, sc store.MemoryScope, g *store.MemoryGraph, seeded time.Time) error {
	what := "memory " + scopeName(sc)
	return s.memWrite(ctx, "load "+what, sc, func(tx Querier) error {
		ids := make(map[string]int64, len(g.Entities))
		for _, e := range g.Entities {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES (?,?,?,?,?,?,?) RETURNING id`,
				sc.Repo, sc.Owner, e.Name, e.Type, e.Session, e.Turn, s.d.Time(e.CreatedAt)).Scan(&id)
			if err != nil {
				return s.Loaded(what+" entity "+e.Name, err)
			}
			ids[e.Name] = id
			for _, o := range e.Observations {
				if _, err := tx.Exec(ctx, `INSERT INTO memory_observations (entity, text, session, turn, created_at) VALUES (?,?,?,?,?)`,
					id, o.Text, o.Session, o.Turn, s.d.Time(o.CreatedAt)); err != nil {
					return s.Loaded(what+" observation of "+e.Name, err)
				}
			}
		}
		for _, r := range g.Relations {
			src, ok1 := ids[r.From]
			dst, ok2 := ids[r.To]
			if !ok1 || !ok2 {
				return s.errorf("load %s: relation %s -%s-> %s names an entity the graph does not have", what, r.From, r.Type, r.To)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO memory_relations (src, dst, type, session, turn, created_at) VALUES (?,?,?,?,?,?)`,
				src, dst, r.Type, r.Session, r.Turn, s.d.Time(r.CreatedAt)); err != nil {
				return s.Loaded(what+" relation "+r.From+" "+r.Type+" "+r.To, err)
			}
		}
		if !seeded.IsZero() {
			if _, err := tx.Exec(ctx, `INSERT INTO memory_seeded (repo, owner, seeded_at) VALUES (?,?,?)`, sc.Repo, sc.Owner, s.d.Time(seeded)); err != nil {
				return s.Loaded(what+" seeded mark", err)
			}
		}
		return nil
	})
}

// appendStrings appends vs to args.
func appendStrings(args []any, vs []string) []any {
	for _, v := range vs {
		args = append(args, v)
	}
	return args
}
