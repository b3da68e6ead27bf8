package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

// What harvest store migrate needs beyond store.Store (store.Copier's doc
// says why each call exists). All but LoadMemory are
// package sqlstore's.

var _ store.Copier = (*Store)(nil)

// LoadMemory stores a scope's graph as it is.
func (s *Store) LoadMemory(ctx context.Context, sc store.MemoryScope, g *store.MemoryGraph, seeded time.Time) error {
	what := "memory " + scopeName(sc)
	return s.memWrite(ctx, "load "+what, sc, func(tx pgx.Tx) error {
		ids := make(map[string]int64, len(g.Entities))
		for _, e := range g.Entities {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7) RETURNING id`,
				sc.Repo, sc.Owner, e.Name, e.Type, e.Session, e.Turn, e.CreatedAt).Scan(&id)
			if err != nil {
				return s.loaded(what+" entity "+e.Name, err)
			}
			ids[e.Name] = id
			for _, o := range e.Observations {
				if _, err := tx.Exec(ctx, `INSERT INTO memory_observations (entity, text, session, turn, created_at) VALUES ($1,$2,$3,$4,$5)`,
					id, o.Text, o.Session, o.Turn, o.CreatedAt); err != nil {
					return s.loaded(what+" observation of "+e.Name, err)
				}
			}
		}
		for _, r := range g.Relations {
			src, ok1 := ids[r.From]
			dst, ok2 := ids[r.To]
			if !ok1 || !ok2 {
				return fmt.Errorf("postgres: load %s: relation %s -%s-> %s names an entity the graph does not have", what, r.From, r.Type, r.To)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO memory_relations (src, dst, type, session, turn, created_at) VALUES ($1,$2,$3,$4,$5,$6)`,
				src, dst, r.Type, r.Session, r.Turn, r.CreatedAt); err != nil {
				return s.loaded(what+" relation "+r.From+" "+r.Type+" "+r.To, err)
			}
		}
		if !seeded.IsZero() {
			if _, err := tx.Exec(ctx, `INSERT INTO memory_seeded (repo, owner, seeded_at) VALUES ($1,$2,$3)`, sc.Repo, sc.Owner, seeded); err != nil {
				return s.loaded(what+" seeded mark", err)
			}
		}
		return nil
	})
}

// loaded phrases a Load call's insert error (sqlstore.Store.Loaded).
func (s *Store) loaded(what string, err error) error { return s.Loaded(what, err) }
