package disk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
)

// maxNewDiskCost is what a new, empty disk may take of the host's disk
// (issue 23: an idle session's disk costs at most 8 MiB).
const maxNewDiskCost = 8 << 20

func needDisksHere(t *testing.T) {
	t.Helper()
	testreq.Check(t, testreq.Disks, Check(context.Background(), ""))
}

// dumpe2fs is `dumpe2fs -h` of an image: its superblock as text.
func dumpe2fs(t *testing.T, image string) string {
	t.Helper()
	out, err := exec.Command("dumpe2fs", "-h", image).Output()
	if err != nil {
		t.Fatalf("dumpe2fs -h %s: %v", image, err)
	}
	return string(out)
}

func field(t *testing.T, dump, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `:\s*(.*)$`).FindStringSubmatch(dump)
	if m == nil {
		t.Fatalf("dumpe2fs has no %q:\n%s", name, dump)
	}
	return strings.TrimSpace(m[1])
}

// fsck runs e2fsck -fn on an unmounted image: it must find nothing to fix.
func fsck(t *testing.T, image string) {
	t.Helper()
	out, err := exec.Command("e2fsck", "-fn", image).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn %s: %v\n%s", image, err, out)
	}
}

// A new disk is ext4 with the features mkfsArgs names and no others
// (whatever /etc/mke2fs.conf says), clean, and costs the host at most
// maxNewDiskCost — measured as du does, on the image's allocated blocks,
// after it was mounted (the kernel may write at mount) and synced. Both
// ways of making it: an mke2fs that marks groups zeroed (≥ 1.47) and one
// that cannot.
func TestNewDiskCost(t *testing.T) {
	needDisksHere(t)
	for _, tc := range []struct {
		name      string
		size      Size
		prezeroed bool
		journal   string
	}{
		{"20GiB", Size{}, true, "32M"},
		{"20GiB-old-mke2fs", Size{}, false, "32M"},
		{"100GiB", Size{Bytes: 100 << 30}, true, "32M"},
		{"64MiB", Size{Bytes: 64 << 20}, true, "4096k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			size := tc.size.WithDefaults()
			d := Disk{Image: filepath.Join(dir, "img"), Dir: filepath.Join(dir, "mnt")}
			if err := makeImage(context.Background(), d.Image, size, tc.prezeroed); err != nil {
				t.Fatal(err)
			}
			fsck(t, d.Image)
			dump := dumpe2fs(t, d.Image)
			feats := strings.Fields(field(t, dump, "Filesystem features"))
			want := strings.Split(strings.TrimPrefix(Features, "none,"), ",")
			for _, f := range want {
				if !strings.Contains(" "+strings.Join(feats, " ")+" ", " "+f+" ") {
					t.Errorf("feature %s missing: %v", f, feats)
				}
			}
			if len(feats) != len(want) {
				t.Errorf("features %v, want exactly %v", feats, want)
			}
			for name, want := range map[string]string{
				"Inode size":            "256",
				"Inode count":           strconv.FormatInt(size.Inodes, 10),
				"Reserved block count":  "0",
				"Block size":            "4096",
				"Errors behavior":       "Remount read-only",
				"Flex block group size": "16",
				"Total journal size":    tc.journal,
			} {
				if got := field(t, dump, name); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}

			if err := d.Mount(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Remove() })
			syncfs(t, d.Dir)
			st, err := StatImage(d.Image)
			if err != nil {
				t.Fatal(err)
			}
			if st.Size != size.Bytes {
				t.Errorf("image size %d, want %d", st.Size, size.Bytes)
			}
			t.Logf("a new %s disk allocates %d bytes of the host (%.2f MiB)", tc.name, st.Allocated, float64(st.Allocated)/(1<<20))
			if st.Allocated > maxNewDiskCost {
				t.Errorf("a new %s disk allocates %d bytes of the host, over %d", tc.name, st.Allocated, maxNewDiskCost)
			}
			if err := d.Unmount(); err != nil {
				t.Fatal(err)
			}
			if m, err := d.Mounted(); err != nil || m {
				t.Fatalf("Mounted after Unmount: %v %v", m, err)
			}
			waitDetached(t, d.Image)
			fsck(t, d.Image)
		})
	}
}

// waitDetached waits until no loop device has image attached: a lazy
// unmount lets the loop device go once the filesystem is released.
func waitDetached(t *testing.T, image string) {
	t.Helper()
	testbin.WaitFor(t, time.Minute, "the loop device of "+image+" to be released", func() bool {
		dev, err := attached(image)
		return err == nil && dev == ""
	})
}

func syncfs(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}
