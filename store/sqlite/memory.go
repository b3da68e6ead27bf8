package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// The repositories' memory: three tables (entities, their observations,
// relations between two entities of one scope) whose rows carry the
// session and turn that wrote them. An entity's observations and
// relations go with it (ON DELETE CASCADE). A scope's size is summed when
// a write asks for a bound, inside the write's transaction, so two
// concurrent writes cannot both pass it.

type memQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func scopeName(sc store.MemoryScope) string {
	if sc.Owner == "" {
		return sc.Repo
	}
	return sc.Repo + " (owner " + sc.Owner + ")"
}

func checkScope(what string, sc store.MemoryScope) error {
	if sc.Repo == "" {
		return fmt.Errorf("sqlite: %s: the memory scope has no repository", what)
	}
	return nil
}

// memorySize sums a scope's bytes (see store.Memory.MemorySize).
func memorySize(ctx context.Context, q memQuerier, sc store.MemoryScope) (int64, error) {
	var n int64
	err := q.QueryRowContext(ctx, `SELECT
	COALESCE((SELECT SUM(length(CAST(name AS BLOB)) + length(CAST(type AS BLOB))) FROM memory_entities WHERE repo = ?1 AND owner = ?2), 0)
	+ COALESCE((SELECT SUM(length(CAST(o.text AS BLOB))) FROM memory_observations o JOIN memory_entities e ON e.id = o.entity WHERE e.repo = ?1 AND e.owner = ?2), 0)
	+ COALESCE((SELECT SUM(length(CAST(r.type AS BLOB))) FROM memory_relations r JOIN memory_entities e ON e.id = r.src WHERE e.repo = ?1 AND e.owner = ?2), 0)`,
		sc.Repo, sc.Owner).Scan(&n)
	return n, err
}

// bound fails a write that left its scope over w.MaxBytes.
func bound(ctx context.Context, tx *sql.Tx, sc store.MemoryScope, w store.MemoryWrite) error {
	if w.MaxBytes <= 0 {
		return nil
	}
	n, err := memorySize(ctx, tx, sc)
	if err != nil {
		return fmt.Errorf("sqlite: memory %s: its size: %w", scopeName(sc), err)
	}
	if n > w.MaxBytes {
		return fmt.Errorf("memory %s would hold %d bytes, over its bound of %d: %w", scopeName(sc), n, w.MaxBytes, store.ErrMemoryFull)
	}
	return nil
}

func entityID(ctx context.Context, q memQuerier, sc store.MemoryScope, name string) (int64, error) {
	var id int64
	err := q.QueryRowContext(ctx, `SELECT id FROM memory_entities WHERE repo = ? AND owner = ? AND name = ?`, sc.Repo, sc.Owner, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("memory %s has no entity %q: %w", scopeName(sc), name, store.ErrNotFound)
	}
	return id, err
}

// addObservations inserts the texts the entity lacks and returns them.
func addObservations(ctx context.Context, tx *sql.Tx, id int64, texts []string, w store.MemoryWrite, now time.Time) ([]*store.MemoryObservation, error) {
	var out []*store.MemoryObservation
	for _, t := range texts {
		res, err := tx.ExecContext(ctx, `INSERT INTO memory_observations (entity, text, session, turn, created_at) VALUES (?,?,?,?,?)
ON CONFLICT (entity, text) DO NOTHING`, id, t, w.Session, w.Turn, ts(now))
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			out = append(out, &store.MemoryObservation{Text: t, Session: w.Session, Turn: w.Turn, CreatedAt: now})
		}
	}
	return out, nil
}

func (s *Store) createEntities(ctx context.Context, tx *sql.Tx, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) ([]*store.MemoryEntity, error) {
	now := s.now().UTC()
	var out []*store.MemoryEntity
	for _, e := range es {
		var id int64
		err := tx.QueryRowContext(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES (?,?,?,?,?,?,?)
ON CONFLICT (repo, owner, name) DO NOTHING RETURNING id`, sc.Repo, sc.Owner, e.Name, e.Type, w.Session, w.Turn, ts(now)).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			continue // the scope has it
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: memory %s: creating entity %q: %w", scopeName(sc), e.Name, err)
		}
		texts := make([]string, 0, len(e.Observations))
		for _, o := range e.Observations {
			texts = append(texts, o.Text)
		}
		obs, err := addObservations(ctx, tx, id, texts, w, now)
		if err != nil {
			return nil, fmt.Errorf("sqlite: memory %s: observations of %q: %w", scopeName(sc), e.Name, err)
		}
		out = append(out, &store.MemoryEntity{Name: e.Name, Type: e.Type, Observations: obs, Session: w.Session, Turn: w.Turn, CreatedAt: now})
	}
	return out, nil
}

// CreateMemoryEntities adds the entities the scope lacks.
func (s *Store) CreateMemoryEntities(ctx context.Context, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) ([]*store.MemoryEntity, error) {
	what := "sqlite: create memory entities in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []*store.MemoryEntity
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		var err error
		if out, err = s.createEntities(ctx, tx, sc, es, w); err != nil {
			return err
		}
		return bound(ctx, tx, sc, w)
	})
	return out, err
}

// AddMemoryObservations adds the texts the entity lacks.
func (s *Store) AddMemoryObservations(ctx context.Context, sc store.MemoryScope, entity string, texts []string, w store.MemoryWrite) ([]string, error) {
	what := "sqlite: add memory observations to " + entity + " in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []string
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		id, err := entityID(ctx, tx, sc, entity)
		if err != nil {
			return err
		}
		obs, err := addObservations(ctx, tx, id, texts, w, s.now().UTC())
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, o := range obs {
			out = append(out, o.Text)
		}
		return bound(ctx, tx, sc, w)
	})
	return out, err
}

// SetMemoryEntity makes an entity be exactly (typ, texts).
func (s *Store) SetMemoryEntity(ctx context.Context, sc store.MemoryScope, name, typ string, texts []string, w store.MemoryWrite) (*store.MemoryEntity, error) {
	what := "sqlite: set memory entity " + name + " in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		now := s.now().UTC()
		id, err := entityID(ctx, tx, sc, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = tx.QueryRowContext(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES (?,?,?,?,?,?,?) RETURNING id`,
				sc.Repo, sc.Owner, name, typ, w.Session, w.Turn, ts(now)).Scan(&id)
		case err == nil:
			_, err = tx.ExecContext(ctx, `UPDATE memory_entities SET type = ? WHERE id = ?`, typ, id)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		keep := map[string]bool{}
		for _, t := range texts {
			keep[t] = true
		}
		rows, err := tx.QueryContext(ctx, `SELECT text FROM memory_observations WHERE entity = ?`, id)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		var drop []string
		for rows.Next() {
			var t string
			if err := rows.Scan(&t); err != nil {
				rows.Close()
				return fmt.Errorf("%s: %w", what, err)
			}
			if !keep[t] {
				drop = append(drop, t)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, t := range drop {
			if _, err := tx.ExecContext(ctx, `DELETE FROM memory_observations WHERE entity = ? AND text = ?`, id, t); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		if _, err := addObservations(ctx, tx, id, texts, w, now); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return bound(ctx, tx, sc, w)
	})
	if err != nil {
		return nil, err
	}
	g, err := s.ReadMemory(ctx, sc, store.MemoryQuery{Names: []string{name}})
	if err != nil {
		return nil, err
	}
	if len(g.Entities) != 1 {
		return nil, fmt.Errorf("memory %s: entity %q was deleted as it was set: %w", scopeName(sc), name, store.ErrNotFound)
	}
	return g.Entities[0], nil
}

// CreateMemoryRelations adds the relations the scope lacks.
func (s *Store) CreateMemoryRelations(ctx context.Context, sc store.MemoryScope, rs []*store.MemoryRelation, w store.MemoryWrite) ([]*store.MemoryRelation, error) {
	what := "sqlite: create memory relations in " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return nil, err
	}
	var out []*store.MemoryRelation
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		now := s.now().UTC()
		for _, r := range rs {
			src, err := entityID(ctx, tx, sc, r.From)
			if err != nil {
				return fmt.Errorf("relation %s -%s-> %s: %w", r.From, r.Type, r.To, err)
			}
			dst, err := entityID(ctx, tx, sc, r.To)
			if err != nil {
				return fmt.Errorf("relation %s -%s-> %s: %w", r.From, r.Type, r.To, err)
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO memory_relations (src, dst, type, session, turn, created_at) VALUES (?,?,?,?,?,?)
ON CONFLICT (src, dst, type) DO NOTHING`, src, dst, r.Type, w.Session, w.Turn, ts(now))
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				out = append(out, &store.MemoryRelation{From: r.From, To: r.To, Type: r.Type, Session: w.Session, Turn: w.Turn, CreatedAt: now})
			}
		}
		return bound(ctx, tx, sc, w)
	})
	return out, err
}

// DeleteMemoryEntities removes entities with what hangs on them.
func (s *Store) DeleteMemoryEntities(ctx context.Context, sc store.MemoryScope, names []string) (int, error) {
	what := "sqlite: delete memory entities in " + scopeName(sc)
	n := 0
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		for _, name := range names {
			res, err := tx.ExecContext(ctx, `DELETE FROM memory_entities WHERE repo = ? AND owner = ? AND name = ?`, sc.Repo, sc.Owner, name)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			k, _ := res.RowsAffected()
			n += int(k)
		}
		return nil
	})
	return n, err
}

// DeleteMemoryObservations removes texts from an entity.
func (s *Store) DeleteMemoryObservations(ctx context.Context, sc store.MemoryScope, entity string, texts []string) (int, error) {
	what := "sqlite: delete memory observations of " + entity + " in " + scopeName(sc)
	n := 0
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		id, err := entityID(ctx, tx, sc, entity)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, t := range texts {
			res, err := tx.ExecContext(ctx, `DELETE FROM memory_observations WHERE entity = ? AND text = ?`, id, t)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			k, _ := res.RowsAffected()
			n += int(k)
		}
		return nil
	})
	return n, err
}

// DeleteMemoryRelations removes relations.
func (s *Store) DeleteMemoryRelations(ctx context.Context, sc store.MemoryScope, rs []*store.MemoryRelation) (int, error) {
	what := "sqlite: delete memory relations in " + scopeName(sc)
	n := 0
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		for _, r := range rs {
			res, err := tx.ExecContext(ctx, `DELETE FROM memory_relations WHERE type = ?5
	AND src = (SELECT id FROM memory_entities WHERE repo = ?1 AND owner = ?2 AND name = ?3)
	AND dst = (SELECT id FROM memory_entities WHERE repo = ?1 AND owner = ?2 AND name = ?4)`,
				sc.Repo, sc.Owner, r.From, r.To, r.Type)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			k, _ := res.RowsAffected()
			n += int(k)
		}
		return nil
	})
	return n, err
}

// ReadMemory reads part of a scope's graph, in one read transaction.
func (s *Store) ReadMemory(ctx context.Context, sc store.MemoryScope, q store.MemoryQuery) (*store.MemoryGraph, error) {
	what := "sqlite: read memory " + scopeName(sc)
	g := &store.MemoryGraph{Entities: []*store.MemoryEntity{}, Relations: []*store.MemoryRelation{}}
	if q.Names != nil && len(q.Names) == 0 {
		return g, nil
	}
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer tx.Rollback()
	query := `SELECT id, name, type, session, turn, created_at FROM memory_entities e WHERE repo = ? AND owner = ?`
	args := []any{sc.Repo, sc.Owner}
	if q.Search != "" {
		query += ` AND (instr(lower(name), lower(?)) > 0 OR instr(lower(type), lower(?)) > 0
	OR EXISTS (SELECT 1 FROM memory_observations o WHERE o.entity = e.id AND instr(lower(o.text), lower(?)) > 0))`
		args = append(args, q.Search, q.Search, q.Search)
	}
	if q.Names != nil {
		query += ` AND name IN (?` + strings.Repeat(`,?`, len(q.Names)-1) + `)`
		for _, n := range q.Names {
			args = append(args, n)
		}
	}
	rows, err := tx.QueryContext(ctx, query+` ORDER BY name`, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	byID := map[int64]*store.MemoryEntity{}
	for rows.Next() {
		var (
			id      int64
			e       store.MemoryEntity
			created int64
		)
		if err := rows.Scan(&id, &e.Name, &e.Type, &e.Session, &e.Turn, &created); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		e.CreatedAt = tm(created)
		e.Observations = []*store.MemoryObservation{}
		byID[id] = &e
		g.Entities = append(g.Entities, &e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(g.Entities) == 0 {
		return g, nil
	}
	rows, err = tx.QueryContext(ctx, `SELECT o.entity, o.text, o.session, o.turn, o.created_at FROM memory_observations o
	JOIN memory_entities e ON e.id = o.entity WHERE e.repo = ? AND e.owner = ? ORDER BY o.id`, sc.Repo, sc.Owner)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for rows.Next() {
		var (
			id      int64
			o       store.MemoryObservation
			created int64
		)
		if err := rows.Scan(&id, &o.Text, &o.Session, &o.Turn, &created); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		o.CreatedAt = tm(created)
		if e := byID[id]; e != nil {
			e.Observations = append(e.Observations, &o)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	rows, err = tx.QueryContext(ctx, `SELECT r.src, r.dst, a.name, b.name, r.type, r.session, r.turn, r.created_at FROM memory_relations r
	JOIN memory_entities a ON a.id = r.src JOIN memory_entities b ON b.id = r.dst
	WHERE a.repo = ? AND a.owner = ? ORDER BY a.name, b.name, r.type`, sc.Repo, sc.Owner)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			src, dst, created int64
			r                 store.MemoryRelation
		)
		if err := rows.Scan(&src, &dst, &r.From, &r.To, &r.Type, &r.Session, &r.Turn, &created); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		r.CreatedAt = tm(created)
		if byID[src] != nil && byID[dst] != nil {
			g.Relations = append(g.Relations, &r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return g, nil
}

// MemorySize is a scope's size in bytes.
func (s *Store) MemorySize(ctx context.Context, sc store.MemoryScope) (int64, error) {
	n, err := memorySize(ctx, s.r, sc)
	if err != nil {
		return 0, fmt.Errorf("sqlite: the size of memory %s: %w", scopeName(sc), err)
	}
	return n, nil
}

// SeedMemory seeds a scope never seeded and empty.
func (s *Store) SeedMemory(ctx context.Context, sc store.MemoryScope, es []*store.MemoryEntity, w store.MemoryWrite) (bool, error) {
	what := "sqlite: seed memory " + scopeName(sc)
	if err := checkScope(what, sc); err != nil {
		return false, err
	}
	seeded := false
	err := s.write(ctx, what, func(tx *sql.Tx) error {
		var had bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM memory_seeded WHERE repo = ?1 AND owner = ?2)
	OR EXISTS (SELECT 1 FROM memory_entities WHERE repo = ?1 AND owner = ?2)`, sc.Repo, sc.Owner).Scan(&had); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if had {
			return nil
		}
		if _, err := s.createEntities(ctx, tx, sc, es, w); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO memory_seeded (repo, owner, seeded_at) VALUES (?,?,?)`, sc.Repo, sc.Owner, ts(s.now())); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		seeded = true
		return bound(ctx, tx, sc, w)
	})
	return seeded && err == nil, err
}
