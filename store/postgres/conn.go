package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-dev/harvest/store"
)

// pgPool is the pgx pool with what a restarting server needs. When the
// server restarts, every idle connection of the pool is dead, and pgx
// finds out only when it uses one (it pings only connections idle for
// over a second). So a statement that fails because its connection is
// gone resets the pool (closing every connection, the dead ones among
// them), and, when pgx says nothing reached the server, runs once more on
// a new connection. An error that remains is marked store.ErrUnavailable.
type pgPool struct{ *pgxpool.Pool }

func (p pgPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := p.Pool.Query(ctx, sql, args...)
	if p.lost(err) && pgconn.SafeToRetry(err) && ctx.Err() == nil {
		rows, err = p.Pool.Query(ctx, sql, args...)
		p.lost(err)
	}
	return rows, unavailable(err)
}

func (p pgPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return row{p: p, ctx: ctx, sql: sql, args: args}
}

func (p pgPool) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	tx, err := p.Pool.BeginTx(ctx, o)
	if p.lost(err) && pgconn.SafeToRetry(err) && ctx.Err() == nil {
		tx, err = p.Pool.BeginTx(ctx, o)
		p.lost(err)
	}
	return tx, unavailable(err)
}

// lost reports whether err says the connection to the server is gone
// (or could not be made), resetting the pool if so.
func (p pgPool) lost(err error) bool {
	if !connLost(err) {
		return false
	}
	p.Reset()
	return true
}

// row is QueryRow's pgx.Row: the statement runs at Scan, again once as
// pgPool says.
type row struct {
	p    pgPool
	ctx  context.Context
	sql  string
	args []any
}

func (r row) Scan(dest ...any) error {
	err := r.p.Pool.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	if r.p.lost(err) && pgconn.SafeToRetry(err) && r.ctx.Err() == nil {
		err = r.p.Pool.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
		r.p.lost(err)
	}
	return unavailable(err)
}

// connLost reports an error of the connection rather than of the
// statement: it could not be made, it broke, or the server is shutting
// down or starting up (SQLSTATE class 08, 57P01-57P03).
func connLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if c := pgCode(err); c != "" {
		return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || pgconn.SafeToRetry(err) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "conn closed")
}

// unavailable marks err store.ErrUnavailable when the connection is what
// failed.
func unavailable(err error) error {
	if !connLost(err) || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}
