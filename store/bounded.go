package store

import (
	"context"
	"time"

	"github.com/harvest-dev/harvest/event"
)

// Every method of Store bounded by its context's budget (budget.go):
// Bounded's. The same shape as observe.go, one method at a time.

func (b *bounded) AcquireLease(ctx context.Context, session string, node string, ttl time.Duration) (Lease, error) {
	ctx, done := Call(ctx, "AcquireLease")
	v, err := b.Store.AcquireLease(ctx, session, node, ttl)
	return v, done(err)
}

func (b *bounded) AcquireLock(ctx context.Context, key string, holder string, ttl time.Duration) (Lock, error) {
	ctx, done := Call(ctx, "AcquireLock")
	v, err := b.Store.AcquireLock(ctx, key, holder, ttl)
	return v, done(err)
}

func (b *bounded) AddDelivery(ctx context.Context, d *Delivery) error {
	ctx, done := Call(ctx, "AddDelivery")
	return done(b.Store.AddDelivery(ctx, d))
}

func (b *bounded) AddMemoryObservations(ctx context.Context, sc MemoryScope, entity string, texts []string, w MemoryWrite) ([]string, error) {
	ctx, done := Call(ctx, "AddMemoryObservations")
	v, err := b.Store.AddMemoryObservations(ctx, sc, entity, texts, w)
	return v, done(err)
}

func (b *bounded) AddMessage(ctx context.Context, m *Message) error {
	ctx, done := Call(ctx, "AddMessage")
	return done(b.Store.AddMessage(ctx, m))
}

func (b *bounded) AppendEvents(ctx context.Context, evs []event.Event) error {
	ctx, done := Call(ctx, "AppendEvents")
	return done(b.Store.AppendEvents(ctx, evs))
}

func (b *bounded) AppendEventsFenced(ctx context.Context, fences []Fence, evs []event.Event, msgs []*Message) error {
	ctx, done := Call(ctx, "AppendEventsFenced")
	return done(b.Store.AppendEventsFenced(ctx, fences, evs, msgs))
}

func (b *bounded) AppendEventsWith(ctx context.Context, evs []event.Event, msgs []*Message) error {
	ctx, done := Call(ctx, "AppendEventsWith")
	return done(b.Store.AppendEventsWith(ctx, evs, msgs))
}

func (b *bounded) BeginDelivery(ctx context.Context, id string) (*Delivery, error) {
	ctx, done := Call(ctx, "BeginDelivery")
	v, err := b.Store.BeginDelivery(ctx, id)
	return v, done(err)
}

func (b *bounded) BranchSession(ctx context.Context, repo string, branch string) (string, error) {
	ctx, done := Call(ctx, "BranchSession")
	v, err := b.Store.BranchSession(ctx, repo, branch)
	return v, done(err)
}

func (b *bounded) CountSessions(ctx context.Context) ([]StateCount, error) {
	ctx, done := Call(ctx, "CountSessions")
	v, err := b.Store.CountSessions(ctx)
	return v, done(err)
}

func (b *bounded) CreateEnvironment(ctx context.Context, e *Environment) error {
	ctx, done := Call(ctx, "CreateEnvironment")
	return done(b.Store.CreateEnvironment(ctx, e))
}

func (b *bounded) CreateMemoryEntities(ctx context.Context, sc MemoryScope, es []*MemoryEntity, w MemoryWrite) ([]*MemoryEntity, error) {
	ctx, done := Call(ctx, "CreateMemoryEntities")
	v, err := b.Store.CreateMemoryEntities(ctx, sc, es, w)
	return v, done(err)
}

func (b *bounded) CreateMemoryRelations(ctx context.Context, sc MemoryScope, rs []*MemoryRelation, w MemoryWrite) ([]*MemoryRelation, error) {
	ctx, done := Call(ctx, "CreateMemoryRelations")
	v, err := b.Store.CreateMemoryRelations(ctx, sc, rs, w)
	return v, done(err)
}

func (b *bounded) CreateSession(ctx context.Context, s *Session, first *Message) error {
	ctx, done := Call(ctx, "CreateSession")
	return done(b.Store.CreateSession(ctx, s, first))
}

func (b *bounded) CreateToken(ctx context.Context, t *Token) error {
	ctx, done := Call(ctx, "CreateToken")
	return done(b.Store.CreateToken(ctx, t))
}

func (b *bounded) CreateWebSession(ctx context.Context, w *WebSession) error {
	ctx, done := Call(ctx, "CreateWebSession")
	return done(b.Store.CreateWebSession(ctx, w))
}

func (b *bounded) DeferDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	ctx, done := Call(ctx, "DeferDelivery")
	return done(b.Store.DeferDelivery(ctx, id, notBefore, why))
}

func (b *bounded) DeleteGitHubMark(ctx context.Context, scope, kind string) error {
	ctx, done := Call(ctx, "DeleteGitHubMark")
	return done(b.Store.DeleteGitHubMark(ctx, scope, kind))
}

func (b *bounded) DeleteMemoryEntities(ctx context.Context, sc MemoryScope, names []string) (int, error) {
	ctx, done := Call(ctx, "DeleteMemoryEntities")
	v, err := b.Store.DeleteMemoryEntities(ctx, sc, names)
	return v, done(err)
}

func (b *bounded) DeleteMemoryObservations(ctx context.Context, sc MemoryScope, entity string, texts []string) (int, error) {
	ctx, done := Call(ctx, "DeleteMemoryObservations")
	v, err := b.Store.DeleteMemoryObservations(ctx, sc, entity, texts)
	return v, done(err)
}

func (b *bounded) DeleteMemoryRelations(ctx context.Context, sc MemoryScope, rs []*MemoryRelation) (int, error) {
	ctx, done := Call(ctx, "DeleteMemoryRelations")
	v, err := b.Store.DeleteMemoryRelations(ctx, sc, rs)
	return v, done(err)
}

func (b *bounded) DeleteSecret(ctx context.Context, scope string, name string) error {
	ctx, done := Call(ctx, "DeleteSecret")
	return done(b.Store.DeleteSecret(ctx, scope, name))
}

func (b *bounded) DeleteSession(ctx context.Context, id string) error {
	ctx, done := Call(ctx, "DeleteSession")
	return done(b.Store.DeleteSession(ctx, id))
}

func (b *bounded) DeleteToken(ctx context.Context, id string) error {
	ctx, done := Call(ctx, "DeleteToken")
	return done(b.Store.DeleteToken(ctx, id))
}

func (b *bounded) DeleteWebSession(ctx context.Context, hash []byte) error {
	ctx, done := Call(ctx, "DeleteWebSession")
	return done(b.Store.DeleteWebSession(ctx, hash))
}

func (b *bounded) Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error) {
	ctx, done := Call(ctx, "Events")
	v, err := b.Store.Events(ctx, session, after, limit)
	return v, done(err)
}

func (b *bounded) FinishDelivery(ctx context.Context, id string, state string, result string) error {
	ctx, done := Call(ctx, "FinishDelivery")
	return done(b.Store.FinishDelivery(ctx, id, state, result))
}

func (b *bounded) ForceUnlock(ctx context.Context, key string) error {
	ctx, done := Call(ctx, "ForceUnlock")
	return done(b.Store.ForceUnlock(ctx, key))
}

func (b *bounded) GetCheckpoint(ctx context.Context, session string) (*Checkpoint, error) {
	ctx, done := Call(ctx, "GetCheckpoint")
	v, err := b.Store.GetCheckpoint(ctx, session)
	return v, done(err)
}

func (b *bounded) GetDelivery(ctx context.Context, id string) (*Delivery, error) {
	ctx, done := Call(ctx, "GetDelivery")
	v, err := b.Store.GetDelivery(ctx, id)
	return v, done(err)
}

func (b *bounded) GetEnvironment(ctx context.Context, id string) (*Environment, error) {
	ctx, done := Call(ctx, "GetEnvironment")
	v, err := b.Store.GetEnvironment(ctx, id)
	return v, done(err)
}

func (b *bounded) GetLease(ctx context.Context, session string) (Lease, error) {
	ctx, done := Call(ctx, "GetLease")
	v, err := b.Store.GetLease(ctx, session)
	return v, done(err)
}

func (b *bounded) GetLock(ctx context.Context, key string) (Lock, error) {
	ctx, done := Call(ctx, "GetLock")
	v, err := b.Store.GetLock(ctx, key)
	return v, done(err)
}

func (b *bounded) CarryObjects(ctx context.Context, keys []string) (map[string]bool, error) {
	ctx, done := Call(ctx, "CarryObjects")
	v, err := b.Store.CarryObjects(ctx, keys)
	return v, done(err)
}

func (b *bounded) GetPack(ctx context.Context, hash string) (*Pack, error) {
	ctx, done := Call(ctx, "GetPack")
	v, err := b.Store.GetPack(ctx, hash)
	return v, done(err)
}

func (b *bounded) GetSecret(ctx context.Context, scope string, name string) (*Secret, error) {
	ctx, done := Call(ctx, "GetSecret")
	v, err := b.Store.GetSecret(ctx, scope, name)
	return v, done(err)
}

func (b *bounded) GetSession(ctx context.Context, id string) (*Session, error) {
	ctx, done := Call(ctx, "GetSession")
	v, err := b.Store.GetSession(ctx, id)
	return v, done(err)
}

func (b *bounded) GitHubMarks(ctx context.Context, scope string) ([]GitHubMark, error) {
	ctx, done := Call(ctx, "GitHubMarks")
	v, err := b.Store.GitHubMarks(ctx, scope)
	return v, done(err)
}

func (b *bounded) HeartbeatNode(ctx context.Context, n Node, ttl time.Duration) (Node, error) {
	ctx, done := Call(ctx, "HeartbeatNode")
	v, err := b.Store.HeartbeatNode(ctx, n, ttl)
	return v, done(err)
}

func (b *bounded) LastSeq(ctx context.Context, session string) (int64, error) {
	ctx, done := Call(ctx, "LastSeq")
	v, err := b.Store.LastSeq(ctx, session)
	return v, done(err)
}

func (b *bounded) ListDeliveries(ctx context.Context, f DeliveryFilter) ([]*Delivery, error) {
	ctx, done := Call(ctx, "ListDeliveries")
	v, err := b.Store.ListDeliveries(ctx, f)
	return v, done(err)
}

func (b *bounded) ListEnvironments(ctx context.Context, f EnvironmentFilter) ([]*Environment, error) {
	ctx, done := Call(ctx, "ListEnvironments")
	v, err := b.Store.ListEnvironments(ctx, f)
	return v, done(err)
}

func (b *bounded) ListNodes(ctx context.Context) ([]Node, error) {
	ctx, done := Call(ctx, "ListNodes")
	v, err := b.Store.ListNodes(ctx)
	return v, done(err)
}

func (b *bounded) ListSecrets(ctx context.Context, scopes ...string) ([]*Secret, error) {
	ctx, done := Call(ctx, "ListSecrets")
	v, err := b.Store.ListSecrets(ctx, scopes...)
	return v, done(err)
}

func (b *bounded) ListSessions(ctx context.Context, f SessionFilter) ([]*Session, error) {
	ctx, done := Call(ctx, "ListSessions")
	v, err := b.Store.ListSessions(ctx, f)
	return v, done(err)
}

func (b *bounded) ListTokens(ctx context.Context) ([]*Token, error) {
	ctx, done := Call(ctx, "ListTokens")
	v, err := b.Store.ListTokens(ctx)
	return v, done(err)
}

func (b *bounded) MemorySize(ctx context.Context, sc MemoryScope) (int64, error) {
	ctx, done := Call(ctx, "MemorySize")
	v, err := b.Store.MemorySize(ctx, sc)
	return v, done(err)
}

func (b *bounded) MessageByKey(ctx context.Context, session string, owner string, key string) (*Message, error) {
	ctx, done := Call(ctx, "MessageByKey")
	v, err := b.Store.MessageByKey(ctx, session, owner, key)
	return v, done(err)
}

func (b *bounded) Messages(ctx context.Context, session string, states ...MessageState) ([]*Message, error) {
	ctx, done := Call(ctx, "Messages")
	v, err := b.Store.Messages(ctx, session, states...)
	return v, done(err)
}

func (b *bounded) PendingDeliveries(ctx context.Context, limit int) ([]*Delivery, error) {
	ctx, done := Call(ctx, "PendingDeliveries")
	v, err := b.Store.PendingDeliveries(ctx, limit)
	return v, done(err)
}

func (b *bounded) PruneDeliveries(ctx context.Context, before time.Time) (int, error) {
	ctx, done := Call(ctx, "PruneDeliveries")
	v, err := b.Store.PruneDeliveries(ctx, before)
	return v, done(err)
}

func (b *bounded) PutCheckpoint(ctx context.Context, f Fence, c *Checkpoint) error {
	ctx, done := Call(ctx, "PutCheckpoint")
	return done(b.Store.PutCheckpoint(ctx, f, c))
}

func (b *bounded) PutGitHubMark(ctx context.Context, m GitHubMark) error {
	ctx, done := Call(ctx, "PutGitHubMark")
	return done(b.Store.PutGitHubMark(ctx, m))
}

func (b *bounded) PutPack(ctx context.Context, p *Pack) error {
	ctx, done := Call(ctx, "PutPack")
	return done(b.Store.PutPack(ctx, p))
}

func (b *bounded) PutSecret(ctx context.Context, s *Secret) error {
	ctx, done := Call(ctx, "PutSecret")
	return done(b.Store.PutSecret(ctx, s))
}

func (b *bounded) ReadMemory(ctx context.Context, sc MemoryScope, q MemoryQuery) (*MemoryGraph, error) {
	ctx, done := Call(ctx, "ReadMemory")
	v, err := b.Store.ReadMemory(ctx, sc, q)
	return v, done(err)
}

func (b *bounded) ReleaseLease(ctx context.Context, l Lease) error {
	ctx, done := Call(ctx, "ReleaseLease")
	return done(b.Store.ReleaseLease(ctx, l))
}

func (b *bounded) ReleaseLock(ctx context.Context, key string, holder string) error {
	ctx, done := Call(ctx, "ReleaseLock")
	return done(b.Store.ReleaseLock(ctx, key, holder))
}

func (b *bounded) RemoveNode(ctx context.Context, id string) error {
	ctx, done := Call(ctx, "RemoveNode")
	return done(b.Store.RemoveNode(ctx, id))
}

func (b *bounded) NodeLeases(ctx context.Context, node string) ([]Lease, error) {
	ctx, done := Call(ctx, "NodeLeases")
	v, err := b.Store.NodeLeases(ctx, node)
	return v, done(err)
}

func (b *bounded) ReplayDelivery(ctx context.Context, id string) (*Delivery, error) {
	ctx, done := Call(ctx, "ReplayDelivery")
	v, err := b.Store.ReplayDelivery(ctx, id)
	return v, done(err)
}

func (b *bounded) RetryDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	ctx, done := Call(ctx, "RetryDelivery")
	return done(b.Store.RetryDelivery(ctx, id, notBefore, why))
}

func (b *bounded) SeedMemory(ctx context.Context, sc MemoryScope, es []*MemoryEntity, w MemoryWrite) (bool, error) {
	ctx, done := Call(ctx, "SeedMemory")
	v, err := b.Store.SeedMemory(ctx, sc, es, w)
	return v, done(err)
}

func (b *bounded) SetMemoryEntity(ctx context.Context, sc MemoryScope, name string, typ string, texts []string, w MemoryWrite) (*MemoryEntity, error) {
	ctx, done := Call(ctx, "SetMemoryEntity")
	v, err := b.Store.SetMemoryEntity(ctx, sc, name, typ, texts, w)
	return v, done(err)
}

func (b *bounded) SetMessageState(ctx context.Context, session string, id string, state MessageState, turn string) error {
	ctx, done := Call(ctx, "SetMessageState")
	return done(b.Store.SetMessageState(ctx, session, id, state, turn))
}

func (b *bounded) SetMessageStateFenced(ctx context.Context, f Fence, id string, state MessageState, turn string) error {
	ctx, done := Call(ctx, "SetMessageStateFenced")
	return done(b.Store.SetMessageStateFenced(ctx, f, id, state, turn))
}

func (b *bounded) SweepPacks(ctx context.Context, before time.Time) (int, error) {
	ctx, done := Call(ctx, "SweepPacks")
	v, err := b.Store.SweepPacks(ctx, before)
	return v, done(err)
}

func (b *bounded) TokenByHash(ctx context.Context, hash []byte) (*Token, error) {
	ctx, done := Call(ctx, "TokenByHash")
	v, err := b.Store.TokenByHash(ctx, hash)
	return v, done(err)
}

func (b *bounded) TokenByWebSession(ctx context.Context, hash []byte, now time.Time) (*Token, error) {
	ctx, done := Call(ctx, "TokenByWebSession")
	v, err := b.Store.TokenByWebSession(ctx, hash, now)
	return v, done(err)
}

func (b *bounded) UpdateEnvironment(ctx context.Context, id string, fn func(*Environment) error) (*Environment, error) {
	ctx, done := Call(ctx, "UpdateEnvironment")
	v, err := b.Store.UpdateEnvironment(ctx, id, fn)
	return v, done(err)
}

func (b *bounded) UpdateSession(ctx context.Context, id string, fn func(*Session) error) (*Session, error) {
	ctx, done := Call(ctx, "UpdateSession")
	v, err := b.Store.UpdateSession(ctx, id, fn)
	return v, done(err)
}

func (b *bounded) UpdateSessionFenced(ctx context.Context, f Fence, fn func(*Session) error) (*Session, error) {
	ctx, done := Call(ctx, "UpdateSessionFenced")
	v, err := b.Store.UpdateSessionFenced(ctx, f, fn)
	return v, done(err)
}

func (b *bounded) Orphans(ctx context.Context, limit int) ([]Orphan, int, error) {
	ctx, done := Call(ctx, "Orphans")
	v, n, err := b.Store.Orphans(ctx, limit)
	return v, n, done(err)
}

func (b *bounded) RemoveDeadNodes(ctx context.Context, gone time.Duration) ([]string, error) {
	ctx, done := Call(ctx, "RemoveDeadNodes")
	v, err := b.Store.RemoveDeadNodes(ctx, gone)
	return v, done(err)
}
