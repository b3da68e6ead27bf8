package carry

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestCancel(t *testing.T) {
	src := freshDir(t, "src")
	for i := range 64 {
		writeFile(t, filepath.Join(src, "d", string(rune('A'+i))), randBytes(uint64(i), 1<<20), 0o644)
	}
	opt := Options{PackSize: 1 << 20}

	t.Run("snapshot", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		packs := newMemPacks()
		var once sync.Once
		var canceled time.Time
		packs.onPut = func() { once.Do(func() { canceled = time.Now(); cancel() }) }
		_, err := Snapshot(ctx, src, nil, packs, opt)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(canceled); d > 2*time.Second {
			t.Errorf("Snapshot returned %v after cancel", d)
		}
		if packs.puts > 3 {
			t.Errorf("%d packs stored after cancel at the first", packs.puts)
		}
	})

	t.Run("restore", func(t *testing.T) {
		needRoot(t)
		packs := newMemPacks()
		m, err := Snapshot(context.Background(), src, nil, packs, opt)
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gets := 0
		packs.onGet = func() {
			if gets++; gets == 2 {
				cancel()
			}
		}
		_, err = Restore(ctx, freshDir(t, "dst"), m, packs, opt)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if gets > 2 {
			t.Errorf("%d packs fetched, cancel was at the second", gets)
		}
	})
}
