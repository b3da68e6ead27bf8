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
// The packs and the manifests are objects in the checkpoint store (package
// store/objstore: a directory, or an S3 bucket); the store keeps a
// reference to each (its object's key, size and sha256). Packs and
// manifests stored before that (in the database itself, Pack.Data and
// Checkpoint.Manifest) are still read. The objects no reference names
// (those of replaced checkpoints and deleted sessions, of swept packs, of
// a writer that died) are the object GC's (CarryObjects says which are
// named).
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
	// ManifestObject is the key of the object holding the listing
	// (workspace/carry), opaque to the store, in the checkpoint store;
	// ManifestSize and ManifestSHA256 its size and hex sha256.
	ManifestObject string `json:"manifest_object,omitempty"`
	ManifestSize   int64  `json:"manifest_size,omitempty"`
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	// Manifest is the listing itself, for a checkpoint stored before the
	// checkpoint store (ManifestObject ""); nil otherwise.
	Manifest []byte `json:"-"`
	// Packs are the packs Manifest references: all must be stored.
	Packs []string `json:"packs"`
	// Bytes and Files are the workspace's size.
	Bytes int64 `json:"bytes"`
	Files int   `json:"files"`
	// CreatedAt is set by the store.
	CreatedAt time.Time `json:"created_at"`
	// Replaced is set by PutCheckpoint: the manifest object of the
	// checkpoint it replaced ("" : none, or one in the database), for
	// the caller to delete.
	Replaced string `json:"-"`
}

// Pack is where a pack is.
type Pack struct {
	// Hash is the hex sha256 of the pack's bytes.
	Hash string
	// Object is the key of the object holding it in the checkpoint store,
	// Size its size; "" for a pack stored before the checkpoint store,
	// whose bytes are Data.
	Object string
	Size   int64
	Data   []byte
}

// Carry is the part of a Store that carries workspaces between nodes.
type Carry interface {
	// PutPack records a pack (the caller checked its hash names its
	// bytes, and stored its object). One already recorded is kept as it
	// is, only its time refreshed (SweepPacks spares it).
	PutPack(ctx context.Context, p *Pack) error
	// GetPack returns where a pack is; ErrNotFound when it is not stored.
	GetPack(ctx context.Context, hash string) (*Pack, error)
	// CarryObjects returns which of keys (at most 1000) a pack or a
	// checkpoint names.
	CarryObjects(ctx context.Context, keys []string) (map[string]bool, error)
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
