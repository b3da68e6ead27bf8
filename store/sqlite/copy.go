package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// What harvest store migrate needs beyond store.Store (store.Copier's doc
// says why each call exists).

var _ store.Copier = (*Store)(nil)

// DumpDeliveries lists every delivery by id.
func (s *Store) DumpDeliveries(ctx context.Context) ([]*store.Delivery, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+deliveryCols+` FROM deliveries ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dump deliveries: %w", err)
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: dump deliveries: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DumpWebSessions lists every web session by hash.
func (s *Store) DumpWebSessions(ctx context.Context) ([]*store.WebSession, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT hash, token_id, created_at, expires_at FROM web_sessions ORDER BY hash`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dump web sessions: %w", err)
	}
	defer rows.Close()
	var out []*store.WebSession
	for rows.Next() {
		var (
			w                store.WebSession
			created, expires int64
		)
		if err := rows.Scan(&w.Hash, &w.TokenID, &created, &expires); err != nil {
			return nil, fmt.Errorf("sqlite: dump web sessions: %w", err)
		}
		w.CreatedAt, w.ExpiresAt = tm(created), tm(expires)
		out = append(out, &w)
	}
	return out, rows.Err()
}

// DumpMemoryScopes lists the scopes with an entity or seeded.
func (s *Store) DumpMemoryScopes(ctx context.Context) ([]store.MemoryScopeInfo, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT repo, owner, MAX(seeded_at) FROM (
	SELECT repo, owner, 0 AS seeded_at FROM memory_entities
	UNION ALL SELECT repo, owner, seeded_at FROM memory_seeded)
GROUP BY repo, owner ORDER BY repo, owner`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dump memory scopes: %w", err)
	}
	defer rows.Close()
	var out []store.MemoryScopeInfo
	for rows.Next() {
		var (
			sc     store.MemoryScopeInfo
			seeded int64
		)
		if err := rows.Scan(&sc.Scope.Repo, &sc.Scope.Owner, &seeded); err != nil {
			return nil, fmt.Errorf("sqlite: dump memory scopes: %w", err)
		}
		sc.Seeded = tm(seeded)
		out = append(out, sc)
	}
	return out, rows.Err()
}

// LoadDelivery stores d as it is.
func (s *Store) LoadDelivery(ctx context.Context, d *store.Delivery) error {
	return s.write(ctx, "sqlite: load delivery "+d.ID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO deliveries (`+deliveryCols+`) VALUES (?,?,?,?,?,?,?,?,?,?)`,
			d.ID, d.Event, d.Payload, ts(d.ReceivedAt), d.State, d.Attempts, d.Result, ts(d.DoneAt), ts(d.NotBefore), d.Replays)
		return loaded("delivery "+d.ID, err)
	})
}

// LoadSecret stores x as it is.
func (s *Store) LoadSecret(ctx context.Context, x *store.Secret) error {
	return s.write(ctx, "sqlite: load secret "+x.Scope+" "+x.Name, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES (?,?,?,?,?,?,?,?)`,
			x.Scope, x.Name, x.Ciphertext, x.KeyID, x.Session, x.SetBy, ts(x.CreatedAt), ts(x.UpdatedAt))
		return loaded("secret "+x.Scope+" "+x.Name, err)
	})
}

// LoadMemory stores a scope's graph as it is.
func (s *Store) LoadMemory(ctx context.Context, sc store.MemoryScope, g *store.MemoryGraph, seeded time.Time) error {
	what := "memory " + scopeName(sc)
	return s.write(ctx, "sqlite: load "+what, func(tx *sql.Tx) error {
		ids := make(map[string]int64, len(g.Entities))
		for _, e := range g.Entities {
			var id int64
			err := tx.QueryRowContext(ctx, `INSERT INTO memory_entities (repo, owner, name, type, session, turn, created_at) VALUES (?,?,?,?,?,?,?) RETURNING id`,
				sc.Repo, sc.Owner, e.Name, e.Type, e.Session, e.Turn, ts(e.CreatedAt)).Scan(&id)
			if err != nil {
				return loaded(what+" entity "+e.Name, err)
			}
			ids[e.Name] = id
			for _, o := range e.Observations {
				if _, err := tx.ExecContext(ctx, `INSERT INTO memory_observations (entity, text, session, turn, created_at) VALUES (?,?,?,?,?)`,
					id, o.Text, o.Session, o.Turn, ts(o.CreatedAt)); err != nil {
					return loaded(what+" observation of "+e.Name, err)
				}
			}
		}
		for _, r := range g.Relations {
			src, ok1 := ids[r.From]
			dst, ok2 := ids[r.To]
			if !ok1 || !ok2 {
				return fmt.Errorf("sqlite: load %s: relation %s -%s-> %s names an entity the graph does not have", what, r.From, r.Type, r.To)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO memory_relations (src, dst, type, session, turn, created_at) VALUES (?,?,?,?,?,?)`,
				src, dst, r.Type, r.Session, r.Turn, ts(r.CreatedAt)); err != nil {
				return loaded(what+" relation "+r.From+" "+r.Type+" "+r.To, err)
			}
		}
		if !seeded.IsZero() {
			if _, err := tx.ExecContext(ctx, `INSERT INTO memory_seeded (repo, owner, seeded_at) VALUES (?,?,?)`, sc.Repo, sc.Owner, ts(seeded)); err != nil {
				return loaded(what+" seeded mark", err)
			}
		}
		return nil
	})
}

// LoadLease stores l as it is.
func (s *Store) LoadLease(ctx context.Context, l store.Lease) error {
	return s.write(ctx, "sqlite: load lease of session "+l.Session, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO session_leases (session, node, epoch, expires) VALUES (?,?,?,?)`,
			l.Session, l.Node, l.Epoch, ts(l.Expires))
		return loaded("lease of session "+l.Session, err)
	})
}

// loaded phrases a Load call's insert error: a row that exists is
// ErrConflict.
func loaded(what string, err error) error {
	if isDuplicate(err) {
		return fmt.Errorf("sqlite: load %s: it exists: %w", what, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlite: load %s: %w", what, err)
	}
	return nil
}
