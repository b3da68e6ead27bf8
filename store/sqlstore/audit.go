package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

const auditCols = `id, time, user_id, token, channel, remote, action, target, result, detail`

func scanAudit(r Row) (*store.AuditEntry, error) {
	var (
		e      store.AuditEntry
		at     Time
		detail []byte
	)
	if err := r.Scan(&e.ID, &at, &e.User, &e.Token, &e.Channel, &e.Remote, &e.Action, &e.Target, &e.Result, &detail); err != nil {
		return nil, err
	}
	e.Time = at.T
	if len(detail) > 0 {
		e.Detail = json.RawMessage(detail)
	}
	return &e, nil
}

// insertAudit appends e in tx and sets its ID (and a zero Time).
func (s *Store) insertAudit(ctx context.Context, tx Querier, e *store.AuditEntry) error {
	if e.Action == "" || e.Channel == "" || e.Result == "" {
		return fmt.Errorf("audit entry: action, channel and result must not be empty (%q, %q, %q)", e.Action, e.Channel, e.Result)
	}
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	var detail any = s.d.JSONAbsent()
	if len(e.Detail) > 0 {
		if !json.Valid(e.Detail) || !strings.HasPrefix(strings.TrimSpace(string(e.Detail)), "{") {
			return fmt.Errorf("audit entry %s: its detail is not a JSON object", e.Action)
		}
		detail = string(e.Detail)
	}
	return tx.QueryRow(ctx, `INSERT INTO audit (time, user_id, token, channel, remote, action, target, result, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		s.d.Time(e.Time), e.User, e.Token, e.Channel, e.Remote, e.Action, e.Target, e.Result, detail).Scan(&e.ID)
}

// auditIn appends the context's audit entry (store.WithAudit), if any, in
// tx: the change tx makes and its entry commit together. Its Result is
// AuditOK.
func (s *Store) auditIn(ctx context.Context, tx Querier) error {
	e := store.AuditOf(ctx)
	if e == nil {
		return nil
	}
	c := *e
	c.Result = store.AuditOK
	if err := s.insertAudit(ctx, tx, &c); err != nil {
		return s.errorf("recording the audit entry: %w", err)
	}
	// The transaction may run again (PostgreSQL's retries): the entry
	// takes the ID of the run that commits.
	*e = c
	return nil
}

// AppendAudit stores e.
func (s *Store) AppendAudit(ctx context.Context, e *store.AuditEntry) error {
	c := *e
	err := s.write(ctx, "append audit entry", func(tx Querier) error {
		if err := s.insertAudit(ctx, tx, &c); err != nil {
			return s.errorf("append audit entry: %w", err)
		}
		return nil
	})
	if err == nil {
		*e = c
	}
	return err
}

// ListAudit lists entries, newest (highest ID) first.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]*store.AuditEntry, error) {
	var (
		where []string
		args  []any
	)
	if f.User != "" {
		where, args = append(where, "user_id = ?"), append(args, f.User)
	}
	if f.Action != "" {
		where, args = append(where, "action = ?"), append(args, f.Action)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "time >= ?"), append(args, s.d.Time(f.Since))
	}
	if !f.Until.IsZero() {
		where, args = append(where, "time < ?"), append(args, s.d.Time(f.Until))
	}
	if f.Before > 0 {
		where, args = append(where, "id < ?"), append(args, f.Before)
	}
	q := `SELECT ` + auditCols + ` FROM audit`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.reader().Query(ctx, q+" ORDER BY id DESC LIMIT ?", append(args, int64(limit))...)
	out, err := collect(rows, err, scanAudit)
	if err != nil {
		return nil, s.errorf("list audit: %w", err)
	}
	return out, nil
}
