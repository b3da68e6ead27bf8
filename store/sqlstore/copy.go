package sqlstore

import (
	"context"

	"github.com/harvest-dev/harvest/store"
)

var _ store.Copier = (*Store)(nil)

// What harvest store migrate needs beyond store.Store (store.Copier's doc
// says why each call exists).
// LoadMemory is in memory.go.

// DumpDeliveries lists every delivery by id.
func (s *Store) DumpDeliveries(ctx context.Context) ([]*store.Delivery, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+deliveryCols+` FROM deliveries ORDER BY id`)
	out, err := collect(rows, err, scanDelivery)
	if err != nil {
		return nil, s.errorf("dump deliveries: %w", err)
	}
	return out, nil
}

// DumpWebSessions lists every web session by hash.
func (s *Store) DumpWebSessions(ctx context.Context) ([]*store.WebSession, error) {
	rows, err := s.reader().Query(ctx, `SELECT hash, token_id, user_id, via, created_at, expires_at FROM web_sessions ORDER BY hash`)
	out, err := collect(rows, err, func(r Row) (*store.WebSession, error) {
		var (
			w                store.WebSession
			created, expires Time
		)
		err := r.Scan(&w.Hash, &w.TokenID, &w.User, &w.Via, &created, &expires)
		w.CreatedAt, w.ExpiresAt = created.T, expires.T
		return &w, err
	})
	if err != nil {
		return nil, s.errorf("dump web sessions: %w", err)
	}
	return out, nil
}

// DumpMemoryScopes lists the scopes with an entity or seeded.
func (s *Store) DumpMemoryScopes(ctx context.Context) ([]store.MemoryScopeInfo, error) {
	rows, err := s.reader().Query(ctx, `SELECT scopes.repo, scopes.owner, m.seeded_at FROM (
	SELECT repo, owner FROM memory_entities UNION SELECT repo, owner FROM memory_seeded) AS scopes
LEFT JOIN memory_seeded m ON m.repo = scopes.repo AND m.owner = scopes.owner
ORDER BY scopes.repo, scopes.owner`)
	infos, err := collect(rows, err, func(r Row) (*store.MemoryScopeInfo, error) {
		var (
			sc     store.MemoryScopeInfo
			seeded Time
		)
		err := r.Scan(&sc.Scope.Repo, &sc.Scope.Owner, &seeded)
		sc.Seeded = seeded.T
		return &sc, err
	})
	if err != nil {
		return nil, s.errorf("dump memory scopes: %w", err)
	}
	return values(infos), nil
}

// LoadDelivery stores d as it is.
func (s *Store) LoadDelivery(ctx context.Context, d *store.Delivery) error {
	payload := d.Payload
	if payload == nil {
		payload = []byte{}
	}
	return s.write(ctx, "load delivery "+d.ID, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO deliveries (`+deliveryCols+`) VALUES (?,?,?,?,?,?,?,?,?,?)`,
			d.ID, d.Event, payload, s.d.Time(d.ReceivedAt), d.State, d.Attempts, d.Result, s.d.Time(d.DoneAt), s.d.Time(d.NotBefore), d.Replays)
		return s.Loaded("delivery "+d.ID, err)
	})
}

// LoadSecret stores x as it is.
func (s *Store) LoadSecret(ctx context.Context, x *store.Secret) error {
	return s.write(ctx, "load secret "+x.Scope+" "+x.Name, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES (?,?,?,?,?,?,?,?,?)`,
			x.Scope, x.Name, x.Ciphertext, x.KeyID, x.Session, x.SetBy, s.d.Time(x.CreatedAt), s.d.Time(x.UpdatedAt), x.SetByUser)
		return s.Loaded("secret "+x.Scope+" "+x.Name, err)
	})
}

// LoadLease stores l as it is, but for its expiry: that is its node's
// heartbeat's, and nodes are not copied (a lease whose node is not in the
// store is expired).
func (s *Store) LoadLease(ctx context.Context, l store.Lease) error {
	return s.write(ctx, "load lease of session "+l.Session, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO session_leases (session, node, epoch, gen) VALUES (?,?,?,?)`,
			l.Session, l.Node, l.Epoch, l.Gen)
		return s.Loaded("lease of session "+l.Session, err)
	})
}

// Loaded phrases a Load call's insert error: a row that exists is
// ErrConflict.
func (s *Store) Loaded(what string, err error) error {
	if s.d.IsDuplicate(err) {
		return s.errorf("load %s: it exists: %w", what, store.ErrConflict)
	}
	if err != nil {
		return s.errorf("load %s: %w", what, err)
	}
	return nil
}
