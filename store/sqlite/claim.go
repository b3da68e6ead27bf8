package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrInUse: a harvest serve (or harvest store migrate) has the database
// file; the caller stops it first. A *InUseError says which process.
var ErrInUse = errors.New("in use")

// InUseError is ErrInUse with the process holding the claim.
type InUseError struct {
	Path string
	PID  int // 0 when its lock file does not say
}

func (e *InUseError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s is in use by %s (it holds %s.lock): stop its harvest serve first", e.Path, who, e.Path)
}
func (e *InUseError) Unwrap() error { return ErrInUse }

// Claim takes the database file at path for this process until release is
// called: an exclusive flock on path+".lock", which holds this process's
// pid. harvest serve claims its file for as long as it runs, and harvest
// store migrate claims the file it copies from, so the copy cannot run
// beside a server writing to it. A claim held elsewhere is an *InUseError.
// The kernel drops a claim whose process died, so a crash leaves none.
//
// Claim is advisory: Open does not take it (harvest's other commands read
// and write the file beside a running server, as SQLite allows).
func Claim(path string) (release func() error, err error) {
	lock := path + ".lock"
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claiming %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(lock)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &InUseError{Path: path, PID: pid}
		}
		return nil, fmt.Errorf("sqlite: claiming %s: locking %s: %w", path, lock, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f.Close, nil // closing the file drops the flock
}

// HoldWrites takes the database's write lock (BEGIN IMMEDIATE on the
// writer connection) until release is called: other connections and
// processes still read, and their writes wait (busy_timeout) then fail
// with SQLITE_BUSY. harvest store migrate holds it on the file it copies
// from, so what it reads is one state even if a harvest token command
// writes meanwhile. The store's own writes wait for release.
func (s *Store) HoldWrites(ctx context.Context) (release func() error, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: taking the write lock: %w", s.path, err)
	}
	return tx.Rollback, nil
}
