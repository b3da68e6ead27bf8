package store

import (
	"context"
	"time"
)

// Several nodes on different machines do not share a disk: a session's
// workspace (its checkouts, its box's HOME and /tmp) is on its owner's.
// So that another node can take the session over, the owner carries the
// workspace in the store: at the end of every turn it stores a
// Checkpoint, the listing of the workspace (package workspace/carry's
// manifest) whose file contents are in packs. Packs are content-addressed
// and shared between a session's checkpoints (a checkpoint writes only
// the packs of the files that changed), so a turn that touched three
// files stores three files' worth.
//
// A session has one checkpoint, the latest: PutCheckpoint replaces it,
// fenced by the owner's lease (a node that lost the session cannot
// overwrite the new owner's), with the packs it references. Packs that
// no checkpoint references any more are removed by SweepPacks, which
// spares the ones stored after a time (a checkpoint being written stores
// its packs first). Deleting a session deletes its checkpoint.

// Checkpoint is the workspace of a session as its owner last stored it.
type Checkpoint struct {
	Session string `json:"session"`
	// Instance names the copy of the workspace it was taken from (a
	// node's directory): a node whose copy is that instance has it
	// already, any other restores it.
	Instance string `json:"instance"`
	// Node took it, at the end of Turn ("" : before the first turn).
	Node string `json:"node"`
	Turn string `json:"turn"`
	// Manifest is the listing (workspace/carry), opaque to the store.
	Manifest []byte `json:"-"`
	// Packs are the packs Manifest references: all must be stored.
	Packs []string `json:"packs"`
	// Bytes and Files are the workspace's size.
	Bytes int64 `json:"bytes"`
	Files int   `json:"files"`
	// CreatedAt is set by the store.
	CreatedAt time.Time `json:"created_at"`
}

// Carry is the part of a Store that carries workspaces between nodes.
type Carry interface {
	// PutPack stores a pack under its hash (the caller checked the hash
	// names the data); storing one that is there is no error.
	PutPack(ctx context.Context, hash string, data []byte) error
	// GetPack returns a pack; ErrNotFound when it is not stored.
	GetPack(ctx context.Context, hash string) ([]byte, error)
	// PutCheckpoint replaces the session's checkpoint under f (the
	// owner's lease: ErrLeaseLost otherwise). Every pack it names must be
	// stored (ErrNotFound otherwise); CreatedAt is set.
	PutCheckpoint(ctx context.Context, f Fence, c *Checkpoint) error
	// GetCheckpoint is the session's checkpoint; ErrNotFound when none.
	GetCheckpoint(ctx context.Context, session string) (*Checkpoint, error)
	// SweepPacks removes the packs no checkpoint references that were
	// stored before before; it returns how many.
	SweepPacks(ctx context.Context, before time.Time) (int, error)
}
