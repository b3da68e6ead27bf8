package carry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// packWriter gathers file data into packs. Snapshot fills one buffer while
// a single flusher goroutine, owned by the packWriter and waited for by
// finish, compresses, hashes and stores the previous one. Extents written
// before their pack is stored name it by a placeholder ("#<seq>") that
// finish replaces with the hash.
type packWriter struct {
	ctx   context.Context
	packs Packs
	size  int

	buf  []byte
	seq  int
	work chan packJob
	free chan []byte
	wg   sync.WaitGroup

	mu      sync.Mutex
	hashes  map[int]string
	err     error
	written int   // packs stored
	raw     int64 // uncompressed bytes stored
}

type packJob struct {
	seq int
	buf []byte
}

func newPackWriter(ctx context.Context, packs Packs, size int) *packWriter {
	p := &packWriter{
		ctx: ctx, packs: packs, size: size,
		work:   make(chan packJob, 1),
		free:   make(chan []byte, 2),
		hashes: map[int]string{},
	}
	// The buffers grow as packs fill (space): a small workspace's
	// snapshot never holds two whole packs' worth of memory.
	p.free <- nil
	p.free <- nil
	p.buf = <-p.free
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for j := range p.work {
			p.store(j)
			p.free <- j.buf[:0]
		}
	}()
	return p
}

func (p *packWriter) store(j packJob) {
	if p.failed() != nil {
		return
	}
	data := encoder().EncodeAll(j.buf, make([]byte, 0, len(j.buf)/2))
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	err := p.packs.PutPack(p.ctx, h, data)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if p.err == nil {
			p.err = fmt.Errorf("storing pack %.12s: %w", h, err)
		}
		return
	}
	p.hashes[j.seq] = h
	p.written++
	p.raw += int64(len(j.buf))
}

func (p *packWriter) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// space returns the free part of the current pack, flushing it first if
// it is full. Its length is never zero.
func (p *packWriter) space() ([]byte, error) {
	if len(p.buf) == p.size {
		if err := p.flush(); err != nil {
			return nil, err
		}
	}
	if len(p.buf) == cap(p.buf) {
		b := make([]byte, len(p.buf), min(p.size, max(2*cap(p.buf), 64<<10)))
		copy(b, p.buf)
		p.buf = b
	}
	return p.buf[len(p.buf):cap(p.buf)], nil
}

// commit appends the n bytes just written into space and returns where
// they are.
func (p *packWriter) commit(n int) (pack string, offset int64) {
	offset = int64(len(p.buf))
	p.buf = p.buf[:len(p.buf)+n]
	return "#" + strconv.Itoa(p.seq), offset
}

func (p *packWriter) flush() error {
	if err := p.failed(); err != nil {
		return err
	}
	if len(p.buf) == 0 {
		return nil
	}
	p.work <- packJob{seq: p.seq, buf: p.buf}
	p.seq++
	p.buf = <-p.free
	return nil
}

// finish stores the last pack, waits for the flusher and rewrites the
// placeholders in m to hashes.
func (p *packWriter) finish(m *Manifest) error {
	err := p.flush()
	p.close()
	if err != nil {
		return err
	}
	if err := p.failed(); err != nil {
		return err
	}
	for i := range m.Entries {
		for k := range m.Entries[i].Extents {
			x := &m.Entries[i].Extents[k]
			if !strings.HasPrefix(x.Pack, "#") {
				continue
			}
			seq, _ := strconv.Atoi(x.Pack[1:])
			h, ok := p.hashes[seq]
			if !ok {
				return fmt.Errorf("internal error: pack %d was not stored", seq)
			}
			x.Pack = h
		}
	}
	return nil
}

// close stops the flusher and waits for it; safe to call twice.
func (p *packWriter) close() {
	if p.work != nil {
		close(p.work)
		p.wg.Wait()
		p.work = nil
	}
}

// packReader fetches, checks and decompresses packs for Restore, keeping
// the last few. It decompresses only the prefix the manifest needs (need),
// which validate bounded by MaxPackSize, so a pack that decompresses to
// more can not make it allocate more.
type packReader struct {
	packs Packs
	need  map[string]int64
	dec   *zstd.Decoder
	cache []cachedPack // most recent last
}

type cachedPack struct {
	hash string
	data []byte
}

const packCacheLen = 3

func newPackReader(packs Packs, need map[string]int64) (*packReader, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(MaxPackSize), zstd.WithDecoderMaxMemory(MaxPackSize))
	if err != nil {
		return nil, err
	}
	return &packReader{packs: packs, need: need, dec: dec}, nil
}

func (r *packReader) close() { r.dec.Close() }

func (r *packReader) get(ctx context.Context, hash string) ([]byte, error) {
	for i, c := range r.cache {
		if c.hash == hash {
			r.cache = append(append(r.cache[:i:i], r.cache[i+1:]...), c)
			return c.data, nil
		}
	}
	stored, err := r.packs.GetPack(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("fetching pack %.12s: %w", hash, err)
	}
	sum := sha256.Sum256(stored)
	if got := hex.EncodeToString(sum[:]); got != hash {
		return nil, fmt.Errorf("pack %.12s is corrupt: its content hashes to %.12s; the store returned the wrong bytes", hash, got)
	}
	if err := r.dec.Reset(bytes.NewReader(stored)); err != nil {
		return nil, fmt.Errorf("decompressing pack %.12s: %w", hash, err)
	}
	data := make([]byte, r.need[hash])
	if _, err := io.ReadFull(r.dec, data); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("pack %.12s holds fewer than the %d bytes the manifest's extents need: manifest and pack do not match", hash, len(data))
		}
		return nil, fmt.Errorf("decompressing pack %.12s: %w", hash, err)
	}
	if len(r.cache) == packCacheLen {
		r.cache = r.cache[1:]
	}
	r.cache = append(r.cache, cachedPack{hash, data})
	return data, nil
}
