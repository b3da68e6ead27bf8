package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

// What harvest store migrate needs beyond store.Store (store.Copier's doc
// says why each call exists).

var _ store.Copier = (*Store)(nil)

// DumpDeliveries lists every delivery by id.
func (s *Store) DumpDeliveries(ctx context.Context) ([]*store.Delivery, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryCols+` FROM deliveries ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("postgres: dump deliveries: %w", err)
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: dump deliveries: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DumpWebSessions lists every web session by hash.
func (s *Store) DumpWebSessions(ctx context.Context) ([]*store.WebSession, error) {
	rows, err := s.pool.Query(ctx, `SELECT hash, token_id, created_at, expires_at FROM web_sessions ORDER BY hash`)
	if err != nil {
		return nil, fmt.Errorf("postgres: dump web sessions: %w", err)
	}
	defer rows.Close()
	var out []*store.WebSession
	for rows.Next() {
		var w store.WebSession
		if err := rows.Scan(&w.Hash, &w.TokenID, &w.CreatedAt, &w.ExpiresAt); err != nil {
			return nil, fmt.Errorf("postgres: dump web sessions: %w", err)
		}
		w.CreatedAt, w.ExpiresAt = w.CreatedAt.UTC(), w.ExpiresAt.UTC()
		out = append(out, &w)
	}
	return out, rows.Err()
}

// DumpMemoryScopes lists the scopes with an entity or seeded.
func (s *Store) DumpMemoryScopes(ctx context.Context) ([]store.MemoryScopeInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT repo, owner, MAX(seeded_at) FROM (
	SELECT repo, owner, NULL::timestamptz AS seeded_at FROM memory_entities
	UNION ALL SELECT repo, owner, seeded_at FROM memory_seeded) AS scopes
GROUP BY repo, owner ORDER BY repo, owner`)
	if err != nil {
		return nil, fmt.Errorf("postgres: dump memory scopes: %w", err)
	}
	defer rows.Close()
	var out []store.MemoryScopeInfo
	for rows.Next() {
		var (
			sc     store.MemoryScopeInfo
			seeded *time.Time
		)
		if err := rows.Scan(&sc.Scope.Repo, &sc.Scope.Owner, &seeded); err != nil {
			return nil, fmt.Errorf("postgres: dump memory scopes: %w", err)
		}
		sc.Seeded = tm(seeded)
		out = append(out, sc)
	}
	return out, rows.Err()
}

// LoadDelivery stores d as it is.
func (s *Store) LoadDelivery(ctx context.Context, d *store.Delivery) error {
	payload := d.Payload
	if payload == nil {
		payload = []byte{}
	}
	return s.write(ctx, "postgres: load delivery "+d.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO deliveries (`+deliveryCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`,
			d.ID, d.Event, payload, d.ReceivedAt, d.State, d.Attempts, d.Result, ts(d.DoneAt), ts(d.NotBefore), d.Replays)
		return loaded("delivery "+d.ID, err)
	})
}

// LoadSecret stores x as it is.
func (s *Store) LoadSecret(ctx context.Context, x *store.Secret) error {
	return s.write(ctx, "postgres: load secret "+x.Scope+" "+x.Name, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`,
			x.Scope, x.Name, x.Ciphertext, x.KeyID, x.Session, x.SetBy, x.CreatedAt, x.UpdatedAt)
		return loaded("secret "+x.Scope+" "+x.Name, err)
	})
}

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
				return loaded(what+" entity "+e.Name, err)
			}
			ids[e.Name] = id
			for _, o := range e.Observations {
				if _, err := tx.Exec(ctx, `INSERT INTO memory_observations (entity, text, session, turn, created_at) VALUES ($1,$2,$3,$4,$5)`,
					id, o.Text, o.Session, o.Turn, o.CreatedAt); err != nil {
					return loaded(what+" observation of "+e.Name, err)
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
				return loaded(what+" relation "+r.From+" "+r.Type+" "+r.To, err)
			}
		}
		if !seeded.IsZero() {
			if _, err := tx.Exec(ctx, `INSERT INTO memory_seeded (repo, owner, seeded_at) VALUES ($1,$2,$3)`, sc.Repo, sc.Owner, seeded); err != nil {
				return loaded(what+" seeded mark", err)
			}
		}
		return nil
	})
}

// LoadLease stores l as it is.
func (s *Store) LoadLease(ctx context.Context, l store.Lease) error {
	return s.write(ctx, "postgres: load lease of session "+l.Session, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO session_leases (session, node, epoch, expires) VALUES ($1,$2,$3,$4)`,
			l.Session, l.Node, l.Epoch, l.Expires)
		return loaded("lease of session "+l.Session, err)
	})
}

// loaded phrases a Load call's insert error: a row that exists is
// ErrConflict.
func loaded(what string, err error) error {
	if isDuplicate(err) {
		return fmt.Errorf("postgres: load %s: it exists: %w", what, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("postgres: load %s: %w", what, err)
	}
	return nil
}
