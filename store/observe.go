package store

import (
	"context"
	"time"

	"github.com/harvest-dev/harvest/event"
)

// Observer hears how long each store operation took and how it ended:
// package telemetry counts them (harvest_store_operation_*). StoreOp runs
// on the caller's goroutine after the operation and must return at once.
type Observer interface {
	// StoreOp reports one call: op is the Store method's name (a fixed
	// set), err what it returned.
	StoreOp(op string, d time.Duration, err error)
}

// Observe returns s with every call reported to o (Close excepted). The
// result is a Store like s, for the layers above; it is how harvest
// serve measures its store without the implementations knowing.
// TestObserveCoversStore fails when a method of Store is not measured
// here.
func Observe(s Store, o Observer) Store {
	if o == nil {
		return s
	}
	return &observed{Store: s, o: o}
}

// observed measures every method of Store. It embeds the Store so that
// Close passes through; every other method is defined below.
type observed struct {
	Store
	o Observer
}

func (o *observed) AcquireLease(ctx context.Context, session string, node string, ttl time.Duration) (Lease, error) {
	start := time.Now()
	v, err := o.Store.AcquireLease(ctx, session, node, ttl)
	o.o.StoreOp("AcquireLease", time.Since(start), err)
	return v, err
}

func (o *observed) AcquireLock(ctx context.Context, key string, holder string, ttl time.Duration) (Lock, error) {
	start := time.Now()
	v, err := o.Store.AcquireLock(ctx, key, holder, ttl)
	o.o.StoreOp("AcquireLock", time.Since(start), err)
	return v, err
}

func (o *observed) AddDelivery(ctx context.Context, d *Delivery) error {
	start := time.Now()
	err := o.Store.AddDelivery(ctx, d)
	o.o.StoreOp("AddDelivery", time.Since(start), err)
	return err
}

func (o *observed) AddMemoryObservations(ctx context.Context, sc MemoryScope, entity string, texts []string, w MemoryWrite) ([]string, error) {
	start := time.Now()
	v, err := o.Store.AddMemoryObservations(ctx, sc, entity, texts, w)
	o.o.StoreOp("AddMemoryObservations", time.Since(start), err)
	return v, err
}

func (o *observed) AddMessage(ctx context.Context, m *Message) error {
	start := time.Now()
	err := o.Store.AddMessage(ctx, m)
	o.o.StoreOp("AddMessage", time.Since(start), err)
	return err
}

func (o *observed) AppendEvents(ctx context.Context, evs []event.Event) error {
	start := time.Now()
	err := o.Store.AppendEvents(ctx, evs)
	o.o.StoreOp("AppendEvents", time.Since(start), err)
	return err
}

func (o *observed) AppendEventsFenced(ctx context.Context, fences []Fence, evs []event.Event, msgs []*Message) error {
	start := time.Now()
	err := o.Store.AppendEventsFenced(ctx, fences, evs, msgs)
	o.o.StoreOp("AppendEventsFenced", time.Since(start), err)
	return err
}

func (o *observed) AppendEventsWith(ctx context.Context, evs []event.Event, msgs []*Message) error {
	start := time.Now()
	err := o.Store.AppendEventsWith(ctx, evs, msgs)
	o.o.StoreOp("AppendEventsWith", time.Since(start), err)
	return err
}

func (o *observed) BeginDelivery(ctx context.Context, id string) (*Delivery, error) {
	start := time.Now()
	v, err := o.Store.BeginDelivery(ctx, id)
	o.o.StoreOp("BeginDelivery", time.Since(start), err)
	return v, err
}

func (o *observed) BranchSession(ctx context.Context, repo string, branch string) (string, error) {
	start := time.Now()
	v, err := o.Store.BranchSession(ctx, repo, branch)
	o.o.StoreOp("BranchSession", time.Since(start), err)
	return v, err
}

func (o *observed) CountSessions(ctx context.Context) ([]StateCount, error) {
	start := time.Now()
	v, err := o.Store.CountSessions(ctx)
	o.o.StoreOp("CountSessions", time.Since(start), err)
	return v, err
}

func (o *observed) CreateEnvironment(ctx context.Context, e *Environment) error {
	start := time.Now()
	err := o.Store.CreateEnvironment(ctx, e)
	o.o.StoreOp("CreateEnvironment", time.Since(start), err)
	return err
}

func (o *observed) CreateMemoryEntities(ctx context.Context, sc MemoryScope, es []*MemoryEntity, w MemoryWrite) ([]*MemoryEntity, error) {
	start := time.Now()
	v, err := o.Store.CreateMemoryEntities(ctx, sc, es, w)
	o.o.StoreOp("CreateMemoryEntities", time.Since(start), err)
	return v, err
}

func (o *observed) CreateMemoryRelations(ctx context.Context, sc MemoryScope, rs []*MemoryRelation, w MemoryWrite) ([]*MemoryRelation, error) {
	start := time.Now()
	v, err := o.Store.CreateMemoryRelations(ctx, sc, rs, w)
	o.o.StoreOp("CreateMemoryRelations", time.Since(start), err)
	return v, err
}

func (o *observed) CreateSession(ctx context.Context, s *Session, first *Message) error {
	start := time.Now()
	err := o.Store.CreateSession(ctx, s, first)
	o.o.StoreOp("CreateSession", time.Since(start), err)
	return err
}

func (o *observed) CreateToken(ctx context.Context, t *Token) error {
	start := time.Now()
	err := o.Store.CreateToken(ctx, t)
	o.o.StoreOp("CreateToken", time.Since(start), err)
	return err
}

func (o *observed) CreateWebSession(ctx context.Context, w *WebSession) error {
	start := time.Now()
	err := o.Store.CreateWebSession(ctx, w)
	o.o.StoreOp("CreateWebSession", time.Since(start), err)
	return err
}

func (o *observed) DeferDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	start := time.Now()
	err := o.Store.DeferDelivery(ctx, id, notBefore, why)
	o.o.StoreOp("DeferDelivery", time.Since(start), err)
	return err
}

func (o *observed) DeleteGitHubMark(ctx context.Context, scope, kind string) error {
	start := time.Now()
	err := o.Store.DeleteGitHubMark(ctx, scope, kind)
	o.o.StoreOp("DeleteGitHubMark", time.Since(start), err)
	return err
}

func (o *observed) DeleteMemoryEntities(ctx context.Context, sc MemoryScope, names []string) (int, error) {
	start := time.Now()
	v, err := o.Store.DeleteMemoryEntities(ctx, sc, names)
	o.o.StoreOp("DeleteMemoryEntities", time.Since(start), err)
	return v, err
}

func (o *observed) DeleteMemoryObservations(ctx context.Context, sc MemoryScope, entity string, texts []string) (int, error) {
	start := time.Now()
	v, err := o.Store.DeleteMemoryObservations(ctx, sc, entity, texts)
	o.o.StoreOp("DeleteMemoryObservations", time.Since(start), err)
	return v, err
}

func (o *observed) DeleteMemoryRelations(ctx context.Context, sc MemoryScope, rs []*MemoryRelation) (int, error) {
	start := time.Now()
	v, err := o.Store.DeleteMemoryRelations(ctx, sc, rs)
	o.o.StoreOp("DeleteMemoryRelations", time.Since(start), err)
	return v, err
}

func (o *observed) DeleteSecret(ctx context.Context, scope string, name string) error {
	start := time.Now()
	err := o.Store.DeleteSecret(ctx, scope, name)
	o.o.StoreOp("DeleteSecret", time.Since(start), err)
	return err
}

func (o *observed) DeleteSession(ctx context.Context, id string) error {
	start := time.Now()
	err := o.Store.DeleteSession(ctx, id)
	o.o.StoreOp("DeleteSession", time.Since(start), err)
	return err
}

func (o *observed) DeleteToken(ctx context.Context, id string) error {
	start := time.Now()
	err := o.Store.DeleteToken(ctx, id)
	o.o.StoreOp("DeleteToken", time.Since(start), err)
	return err
}

func (o *observed) DeleteWebSession(ctx context.Context, hash []byte) error {
	start := time.Now()
	err := o.Store.DeleteWebSession(ctx, hash)
	o.o.StoreOp("DeleteWebSession", time.Since(start), err)
	return err
}

func (o *observed) Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error) {
	start := time.Now()
	v, err := o.Store.Events(ctx, session, after, limit)
	o.o.StoreOp("Events", time.Since(start), err)
	return v, err
}

func (o *observed) FinishDelivery(ctx context.Context, id string, state string, result string) error {
	start := time.Now()
	err := o.Store.FinishDelivery(ctx, id, state, result)
	o.o.StoreOp("FinishDelivery", time.Since(start), err)
	return err
}

func (o *observed) ForceUnlock(ctx context.Context, key string) error {
	start := time.Now()
	err := o.Store.ForceUnlock(ctx, key)
	o.o.StoreOp("ForceUnlock", time.Since(start), err)
	return err
}

func (o *observed) GetCheckpoint(ctx context.Context, session string) (*Checkpoint, error) {
	start := time.Now()
	v, err := o.Store.GetCheckpoint(ctx, session)
	o.o.StoreOp("GetCheckpoint", time.Since(start), err)
	return v, err
}

func (o *observed) GetDelivery(ctx context.Context, id string) (*Delivery, error) {
	start := time.Now()
	v, err := o.Store.GetDelivery(ctx, id)
	o.o.StoreOp("GetDelivery", time.Since(start), err)
	return v, err
}

func (o *observed) GetEnvironment(ctx context.Context, id string) (*Environment, error) {
	start := time.Now()
	v, err := o.Store.GetEnvironment(ctx, id)
	o.o.StoreOp("GetEnvironment", time.Since(start), err)
	return v, err
}

func (o *observed) GetLease(ctx context.Context, session string) (Lease, error) {
	start := time.Now()
	v, err := o.Store.GetLease(ctx, session)
	o.o.StoreOp("GetLease", time.Since(start), err)
	return v, err
}

func (o *observed) GetLock(ctx context.Context, key string) (Lock, error) {
	start := time.Now()
	v, err := o.Store.GetLock(ctx, key)
	o.o.StoreOp("GetLock", time.Since(start), err)
	return v, err
}

func (o *observed) CarryObjects(ctx context.Context, keys []string) (map[string]bool, error) {
	start := time.Now()
	v, err := o.Store.CarryObjects(ctx, keys)
	o.o.StoreOp("CarryObjects", time.Since(start), err)
	return v, err
}

func (o *observed) GetPack(ctx context.Context, hash string) (*Pack, error) {
	start := time.Now()
	v, err := o.Store.GetPack(ctx, hash)
	o.o.StoreOp("GetPack", time.Since(start), err)
	return v, err
}

func (o *observed) GetSecret(ctx context.Context, scope string, name string) (*Secret, error) {
	start := time.Now()
	v, err := o.Store.GetSecret(ctx, scope, name)
	o.o.StoreOp("GetSecret", time.Since(start), err)
	return v, err
}

func (o *observed) GetSession(ctx context.Context, id string) (*Session, error) {
	start := time.Now()
	v, err := o.Store.GetSession(ctx, id)
	o.o.StoreOp("GetSession", time.Since(start), err)
	return v, err
}

func (o *observed) GitHubMarks(ctx context.Context, scope string) ([]GitHubMark, error) {
	start := time.Now()
	v, err := o.Store.GitHubMarks(ctx, scope)
	o.o.StoreOp("GitHubMarks", time.Since(start), err)
	return v, err
}

func (o *observed) HeartbeatNode(ctx context.Context, n Node, ttl time.Duration) (Node, error) {
	start := time.Now()
	v, err := o.Store.HeartbeatNode(ctx, n, ttl)
	o.o.StoreOp("HeartbeatNode", time.Since(start), err)
	return v, err
}

func (o *observed) LastSeq(ctx context.Context, session string) (int64, error) {
	start := time.Now()
	v, err := o.Store.LastSeq(ctx, session)
	o.o.StoreOp("LastSeq", time.Since(start), err)
	return v, err
}

func (o *observed) ListDeliveries(ctx context.Context, f DeliveryFilter) ([]*Delivery, error) {
	start := time.Now()
	v, err := o.Store.ListDeliveries(ctx, f)
	o.o.StoreOp("ListDeliveries", time.Since(start), err)
	return v, err
}

func (o *observed) ListEnvironments(ctx context.Context, f EnvironmentFilter) ([]*Environment, error) {
	start := time.Now()
	v, err := o.Store.ListEnvironments(ctx, f)
	o.o.StoreOp("ListEnvironments", time.Since(start), err)
	return v, err
}

func (o *observed) ListNodes(ctx context.Context) ([]Node, error) {
	start := time.Now()
	v, err := o.Store.ListNodes(ctx)
	o.o.StoreOp("ListNodes", time.Since(start), err)
	return v, err
}

func (o *observed) ListSecrets(ctx context.Context, scopes ...string) ([]*Secret, error) {
	start := time.Now()
	v, err := o.Store.ListSecrets(ctx, scopes...)
	o.o.StoreOp("ListSecrets", time.Since(start), err)
	return v, err
}

func (o *observed) ListSessions(ctx context.Context, f SessionFilter) ([]*Session, error) {
	start := time.Now()
	v, err := o.Store.ListSessions(ctx, f)
	o.o.StoreOp("ListSessions", time.Since(start), err)
	return v, err
}

func (o *observed) ListTokens(ctx context.Context) ([]*Token, error) {
	start := time.Now()
	v, err := o.Store.ListTokens(ctx)
	o.o.StoreOp("ListTokens", time.Since(start), err)
	return v, err
}

func (o *observed) MemorySize(ctx context.Context, sc MemoryScope) (int64, error) {
	start := time.Now()
	v, err := o.Store.MemorySize(ctx, sc)
	o.o.StoreOp("MemorySize", time.Since(start), err)
	return v, err
}

func (o *observed) MessageByKey(ctx context.Context, session string, owner string, key string) (*Message, error) {
	start := time.Now()
	v, err := o.Store.MessageByKey(ctx, session, owner, key)
	o.o.StoreOp("MessageByKey", time.Since(start), err)
	return v, err
}

func (o *observed) Messages(ctx context.Context, session string, states ...MessageState) ([]*Message, error) {
	start := time.Now()
	v, err := o.Store.Messages(ctx, session, states...)
	o.o.StoreOp("Messages", time.Since(start), err)
	return v, err
}

func (o *observed) Orphans(ctx context.Context, limit int) ([]Orphan, int, error) {
	start := time.Now()
	v, n, err := o.Store.Orphans(ctx, limit)
	o.o.StoreOp("Orphans", time.Since(start), err)
	return v, n, err
}

func (o *observed) PendingDeliveries(ctx context.Context, limit int) ([]*Delivery, error) {
	start := time.Now()
	v, err := o.Store.PendingDeliveries(ctx, limit)
	o.o.StoreOp("PendingDeliveries", time.Since(start), err)
	return v, err
}

func (o *observed) PruneDeliveries(ctx context.Context, before time.Time) (int, error) {
	start := time.Now()
	v, err := o.Store.PruneDeliveries(ctx, before)
	o.o.StoreOp("PruneDeliveries", time.Since(start), err)
	return v, err
}

func (o *observed) PutCheckpoint(ctx context.Context, f Fence, c *Checkpoint) error {
	start := time.Now()
	err := o.Store.PutCheckpoint(ctx, f, c)
	o.o.StoreOp("PutCheckpoint", time.Since(start), err)
	return err
}

func (o *observed) PutGitHubMark(ctx context.Context, m GitHubMark) error {
	start := time.Now()
	err := o.Store.PutGitHubMark(ctx, m)
	o.o.StoreOp("PutGitHubMark", time.Since(start), err)
	return err
}

func (o *observed) PutPack(ctx context.Context, p *Pack) error {
	start := time.Now()
	err := o.Store.PutPack(ctx, p)
	o.o.StoreOp("PutPack", time.Since(start), err)
	return err
}

func (o *observed) PutSecret(ctx context.Context, s *Secret) error {
	start := time.Now()
	err := o.Store.PutSecret(ctx, s)
	o.o.StoreOp("PutSecret", time.Since(start), err)
	return err
}

func (o *observed) ReadMemory(ctx context.Context, sc MemoryScope, q MemoryQuery) (*MemoryGraph, error) {
	start := time.Now()
	v, err := o.Store.ReadMemory(ctx, sc, q)
	o.o.StoreOp("ReadMemory", time.Since(start), err)
	return v, err
}

func (o *observed) ReleaseLease(ctx context.Context, l Lease) error {
	start := time.Now()
	err := o.Store.ReleaseLease(ctx, l)
	o.o.StoreOp("ReleaseLease", time.Since(start), err)
	return err
}

func (o *observed) ReleaseLock(ctx context.Context, key string, holder string) error {
	start := time.Now()
	err := o.Store.ReleaseLock(ctx, key, holder)
	o.o.StoreOp("ReleaseLock", time.Since(start), err)
	return err
}

func (o *observed) RemoveNode(ctx context.Context, id string) error {
	start := time.Now()
	err := o.Store.RemoveNode(ctx, id)
	o.o.StoreOp("RemoveNode", time.Since(start), err)
	return err
}

func (o *observed) RemoveDeadNodes(ctx context.Context, gone time.Duration) ([]string, error) {
	start := time.Now()
	v, err := o.Store.RemoveDeadNodes(ctx, gone)
	o.o.StoreOp("RemoveDeadNodes", time.Since(start), err)
	return v, err
}

func (o *observed) NodeLeases(ctx context.Context, node string) ([]Lease, error) {
	start := time.Now()
	v, err := o.Store.NodeLeases(ctx, node)
	o.o.StoreOp("NodeLeases", time.Since(start), err)
	return v, err
}

func (o *observed) ReplayDelivery(ctx context.Context, id string) (*Delivery, error) {
	start := time.Now()
	v, err := o.Store.ReplayDelivery(ctx, id)
	o.o.StoreOp("ReplayDelivery", time.Since(start), err)
	return v, err
}

func (o *observed) RetryDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	start := time.Now()
	err := o.Store.RetryDelivery(ctx, id, notBefore, why)
	o.o.StoreOp("RetryDelivery", time.Since(start), err)
	return err
}

func (o *observed) SeedMemory(ctx context.Context, sc MemoryScope, es []*MemoryEntity, w MemoryWrite) (bool, error) {
	start := time.Now()
	v, err := o.Store.SeedMemory(ctx, sc, es, w)
	o.o.StoreOp("SeedMemory", time.Since(start), err)
	return v, err
}

func (o *observed) SetMemoryEntity(ctx context.Context, sc MemoryScope, name string, typ string, texts []string, w MemoryWrite) (*MemoryEntity, error) {
	start := time.Now()
	v, err := o.Store.SetMemoryEntity(ctx, sc, name, typ, texts, w)
	o.o.StoreOp("SetMemoryEntity", time.Since(start), err)
	return v, err
}

func (o *observed) SetMessageState(ctx context.Context, session string, id string, state MessageState, turn string) error {
	start := time.Now()
	err := o.Store.SetMessageState(ctx, session, id, state, turn)
	o.o.StoreOp("SetMessageState", time.Since(start), err)
	return err
}

func (o *observed) SetMessageStateFenced(ctx context.Context, f Fence, id string, state MessageState, turn string) error {
	start := time.Now()
	err := o.Store.SetMessageStateFenced(ctx, f, id, state, turn)
	o.o.StoreOp("SetMessageStateFenced", time.Since(start), err)
	return err
}

func (o *observed) SweepPacks(ctx context.Context, before time.Time) (int, error) {
	start := time.Now()
	v, err := o.Store.SweepPacks(ctx, before)
	o.o.StoreOp("SweepPacks", time.Since(start), err)
	return v, err
}

func (o *observed) TokenByHash(ctx context.Context, hash []byte) (*Token, error) {
	start := time.Now()
	v, err := o.Store.TokenByHash(ctx, hash)
	o.o.StoreOp("TokenByHash", time.Since(start), err)
	return v, err
}

func (o *observed) TokenByWebSession(ctx context.Context, hash []byte, now time.Time) (*Token, error) {
	start := time.Now()
	v, err := o.Store.TokenByWebSession(ctx, hash, now)
	o.o.StoreOp("TokenByWebSession", time.Since(start), err)
	return v, err
}

func (o *observed) UpdateEnvironment(ctx context.Context, id string, fn func(*Environment) error) (*Environment, error) {
	start := time.Now()
	v, err := o.Store.UpdateEnvironment(ctx, id, fn)
	o.o.StoreOp("UpdateEnvironment", time.Since(start), err)
	return v, err
}

func (o *observed) UpdateSession(ctx context.Context, id string, fn func(*Session) error) (*Session, error) {
	start := time.Now()
	v, err := o.Store.UpdateSession(ctx, id, fn)
	o.o.StoreOp("UpdateSession", time.Since(start), err)
	return v, err
}

func (o *observed) UpdateSessionFenced(ctx context.Context, f Fence, fn func(*Session) error) (*Session, error) {
	start := time.Now()
	v, err := o.Store.UpdateSessionFenced(ctx, f, fn)
	o.o.StoreOp("UpdateSessionFenced", time.Since(start), err)
	return v, err
}
