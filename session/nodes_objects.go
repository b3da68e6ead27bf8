package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/objstore"
	"github.com/harvest-dev/harvest/workspace/carry"
)

// The objects of workspace checkpoints (package store/objstore): the packs
// and the manifests are objects in the checkpoint store (Config.Checkpoints),
// and the store keeps a reference to each. See "Carrying workspaces" in
// nodes.go.
//
//	packs/<hash[:2]>/<hash>.<random>      a pack (content-addressed: hash is
//	                                      its sha256; the random part makes
//	                                      every upload its own object)
//	checkpoints/<session>/<random>        a checkpoint's manifest
//
// An object is uploaded whole before the row naming it is written, so a
// reference never names an object that is not (yet) complete; an object
// no row names is garbage once it is older than objectGrace (a writer
// uploads, then records within that time). Every upload has a key of its
// own, so the GC never deletes an object a writer is about to name.

// objectGrace spares the objects uploaded recently from the object GC.
const objectGrace = time.Hour

// maxPackObject bounds a pack's object: its data is at most
// carry.MaxPackSize before compression, and zstd adds a little to data it
// cannot compress.
const maxPackObject = carry.MaxPackSize + carry.MaxPackSize/64 + 1<<20

// maxManifestObject bounds a manifest's object (workspace/carry bounds
// an encoded manifest to 1 GiB before compression).
const maxManifestObject = 1 << 30

// DefaultCheckpointDir is where a node keeps its checkpoints' objects
// without Config.Checkpoints: below its data directory.
const DefaultCheckpointDir = "checkpoints"

func randomSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// objectPacks stores a snapshot's packs in the checkpoint store and their
// references in the store (carry.Packs).
type objectPacks struct {
	st  store.Store
	obj objstore.Store
}

func (p objectPacks) PutPack(ctx context.Context, hash string, data []byte) error {
	if len(hash) < 2 {
		return fmt.Errorf("pack %q: not a hash", hash)
	}
	key := "packs/" + hash[:2] + "/" + hash + "." + randomSuffix()
	ref, err := p.obj.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return err
	}
	if ref.SHA256 != hash {
		p.obj.Delete(context.WithoutCancel(ctx), key)
		return fmt.Errorf("pack %.12s: stored as sha256 %.12s", hash, ref.SHA256)
	}
	return p.st.PutPack(ctx, &store.Pack{Hash: hash, Object: key, Size: ref.Size})
}

func (p objectPacks) GetPack(ctx context.Context, hash string) ([]byte, error) {
	pk, err := p.st.GetPack(ctx, hash)
	if err != nil {
		return nil, err
	}
	if pk.Object == "" {
		return pk.Data, nil // stored before the checkpoint store
	}
	b, err := objstore.ReadAll(ctx, p.obj, objstore.Ref{Key: pk.Object, Size: pk.Size, SHA256: hash}, maxPackObject)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: the checkpoint store %s lacks it; nodes on separate machines need one checkpoint store they all reach (--checkpoint-store s3://bucket/prefix)", err, p.obj)
	}
	return b, err
}

// putManifest uploads a checkpoint's manifest and sets its reference in cp.
func (c *carrier) putManifest(ctx context.Context, cp *store.Checkpoint, b []byte) error {
	key := "checkpoints/" + cp.Session + "/" + randomSuffix()
	ref, err := c.obj.Put(ctx, key, bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return fmt.Errorf("storing the checkpoint's manifest: %w", err)
	}
	cp.ManifestObject, cp.ManifestSize, cp.ManifestSHA256 = ref.Key, ref.Size, ref.SHA256
	return nil
}

// manifest reads a checkpoint's manifest (from its object, or from the
// store for one stored before the checkpoint store).
func (c *carrier) manifest(ctx context.Context, cp *store.Checkpoint) ([]byte, error) {
	if cp.ManifestObject == "" {
		return cp.Manifest, nil
	}
	b, err := objstore.ReadAll(ctx, c.obj, objstore.Ref{Key: cp.ManifestObject, Size: cp.ManifestSize, SHA256: cp.ManifestSHA256}, maxManifestObject)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: the checkpoint store %s lacks it; nodes on separate machines need one checkpoint store they all reach (--checkpoint-store s3://bucket/prefix)", err, c.obj)
	}
	return b, err
}

// dropManifest deletes the object of a manifest a newer checkpoint
// replaced (the object GC would, later).
func (c *carrier) dropManifest(ctx context.Context, key string) {
	if key == "" {
		return
	}
	// Its own context: the turn's may end as the checkpoint is stored.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err := c.obj.Delete(ctx, key)
	if err != nil {
		c.log.Warn("deleting a replaced checkpoint's manifest (the object GC retries)", "object", key, "err", err)
	}
}

// collectObjects deletes the objects of the checkpoint store that no
// reference names and that are older than objectGrace: those of replaced
// checkpoints, deleted sessions and swept packs, and uploads whose writer
// died before recording them. It returns how many it deleted.
func (c *carrier) collectObjects(ctx context.Context) (int, error) {
	old := time.Now().Add(-objectGrace)
	deleted := 0
	var batch []objstore.Info
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		keys := make([]string, len(batch))
		for i, o := range batch {
			keys[i] = o.Key
		}
		named, err := c.st.CarryObjects(ctx, keys)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if named[k] {
				continue
			}
			if err := c.obj.Delete(ctx, k); err != nil {
				return err
			}
			deleted++
		}
		batch = batch[:0]
		return nil
	}
	for _, prefix := range []string{"packs/", "checkpoints/"} {
		err := c.obj.List(ctx, prefix, func(o objstore.Info) error {
			if !o.Modified.Before(old) || !strings.HasPrefix(o.Key, prefix) {
				return nil
			}
			batch = append(batch, o)
			if len(batch) == 500 {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if err != nil {
			return deleted, fmt.Errorf("collecting the checkpoint store's unused objects: %w", err)
		}
	}
	if d, ok := c.obj.(*objstore.Dir); ok {
		if _, err := d.SweepTemp(ctx, old); err != nil {
			return deleted, fmt.Errorf("removing the checkpoint directory's dead temporary files: %w", err)
		}
	}
	return deleted, nil
}
