package disk

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// cutLoop cuts the loop device dev off from its image, as a power cut
// would: its size becomes one sector, so every later read or write of the
// filesystem on it fails (the kernel refuses I/O past a device's end),
// while what was written before is in the image. Requests in flight finish
// first (the kernel freezes the device's queue to change its size): those
// are the writes a disk had completed when the power went.
func cutLoop(t *testing.T, dev string) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil {
		t.Fatalf("LOOP_GET_STATUS64 %s: %v", dev, err)
	}
	info.Sizelimit = 512
	if err := unix.IoctlLoopSetStatus64(int(f.Fd()), info); err != nil {
		t.Fatalf("cutting %s off (LOOP_SET_STATUS64): %v", dev, err)
	}
}

func crashContent(i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "file %d, written and fsynced before the cut\n", i), 100)
}

// TestCrashReplay: the loop device under a mounted disk is cut off while
// files are being written, some fsynced, some not, with metadata changing
// (files created and deleted). The disk mounts again (the journal is
// replayed), e2fsck -fn finds nothing to fix, and every file whose fsync
// (and its directory's) returned before the cut is there, whole.
func TestCrashReplay(t *testing.T) {
	needDisksHere(t)
	dir := t.TempDir()
	d := Disk{Image: filepath.Join(dir, "img"), Dir: filepath.Join(dir, "mnt")}
	if err := Create(context.Background(), d, Size{Bytes: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove() })
	dev, err := attached(d.Image)
	if err != nil || dev == "" {
		t.Fatalf("the disk's loop device: %q, %v", dev, err)
	}
	for _, sub := range []string{"durable", "churn"} {
		if err := os.Mkdir(filepath.Join(d.Dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var durable []int // files whose fsync returned before the cut
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(durable) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { // fsynced files: each must survive
		defer wg.Done()
		ddir := filepath.Join(d.Dir, "durable")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := writeSynced(filepath.Join(ddir, fmt.Sprint(i)), crashContent(i))
			if err == nil {
				err = syncDir(ddir)
			}
			if err != nil {
				errs <- fmt.Errorf("durable writer, file %d: %w", i, err)
				return
			}
			mu.Lock()
			durable = append(durable, i)
			mu.Unlock()
		}
	}()
	go func() { // writes in flight: data and metadata nobody waits for
		defer wg.Done()
		cdir := filepath.Join(d.Dir, "churn")
		big, err := os.Create(filepath.Join(cdir, "big"))
		if err != nil {
			errs <- err
			return
		}
		defer big.Close()
		buf := bytes.Repeat([]byte("churn"), 1<<16)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%64 == 0 {
				if _, err := big.Seek(0, 0); err != nil { // stay well inside the disk
					errs <- err
					return
				}
			}
			if _, err := big.Write(buf); err != nil {
				errs <- fmt.Errorf("churn writer: %w", err)
				return
			}
			name := filepath.Join(cdir, fmt.Sprint(i%500))
			if err := os.WriteFile(name, buf[:i%4096], 0o644); err != nil {
				errs <- fmt.Errorf("churn writer: %w", err)
				return
			}
			if i%3 == 0 {
				os.Remove(name)
			}
		}
	}()

	testbin.WaitFor(t, 2*time.Minute, "200 fsynced files", func() bool { return count() >= 200 })
	cutLoop(t, dev)
	// The durable writer's next fsync fails (the journal cannot commit);
	// the filesystem then goes read-only and the other writer fails too.
	select {
	case err := <-errs:
		t.Logf("after the cut: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no writer failed within 2 minutes of cutting the disk's device off")
	}
	close(stop)
	wg.Wait()
	kept := append([]int(nil), durable...)
	t.Logf("%d files were fsynced before the cut", len(kept))

	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, d.Image)
	if feats := field(t, dumpe2fs(t, d.Image), "Filesystem features"); !strings.Contains(feats, "needs_recovery") {
		t.Fatalf("after the cut the journal has nothing to replay (features %s): the cut did not catch the disk mid-write", feats)
	}

	// Mounting replays the journal.
	if err := d.Mount(context.Background()); err != nil {
		t.Fatalf("mounting the disk after the cut: %v", err)
	}
	for _, i := range kept {
		b, err := os.ReadFile(filepath.Join(d.Dir, "durable", fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("file %d, fsynced before the cut: %v", i, err)
		}
		if !bytes.Equal(b, crashContent(i)) {
			t.Fatalf("file %d, fsynced before the cut, holds %d bytes that are not what was written", i, len(b))
		}
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "after"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("writing after the replay: %v", err)
	}
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, d.Image)
	fsck(t, d.Image)
}

func writeSynced(name string, b []byte) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
