package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	k := GenerateKey()
	value := []byte("hunter2-canary")
	ct := k.Seal("repo:octo/hello", "NPM_TOKEN", value)
	if bytes.Contains(ct, value) {
		t.Fatal("the ciphertext holds the value in clear")
	}
	got, err := k.Open("repo:octo/hello", "NPM_TOKEN", ct)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("open = %q, %v", got, err)
	}
	if again := k.Seal("repo:octo/hello", "NPM_TOKEN", value); bytes.Equal(again, ct) {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}

	t.Run("tamper", func(t *testing.T) {
		for i := range ct {
			bad := bytes.Clone(ct)
			bad[i] ^= 0x01
			if _, err := k.Open("repo:octo/hello", "NPM_TOKEN", bad); !errors.Is(err, ErrDecrypt) {
				t.Fatalf("byte %d flipped: %v, want ErrDecrypt", i, err)
			}
		}
		for _, bad := range [][]byte{nil, ct[:1], ct[:len(ct)-1], append(bytes.Clone(ct), 0)} {
			if _, err := k.Open("repo:octo/hello", "NPM_TOKEN", bad); !errors.Is(err, ErrDecrypt) {
				t.Fatalf("%d bytes: %v, want ErrDecrypt", len(bad), err)
			}
		}
	})
	t.Run("wrong key", func(t *testing.T) {
		if _, err := GenerateKey().Open("repo:octo/hello", "NPM_TOKEN", ct); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("another key: %v, want ErrDecrypt", err)
		}
	})
	t.Run("moved", func(t *testing.T) {
		for _, id := range [][2]string{{"repo:octo/hello", "OTHER"}, {"repo:octo/other", "NPM_TOKEN"}, {"user:tok-1", "NPM_TOKEN"}, {"repo:octo/hello\x00NPM", "_TOKEN"}} {
			if _, err := k.Open(id[0], id[1], ct); !errors.Is(err, ErrDecrypt) {
				t.Fatalf("moved to %q %q: %v, want ErrDecrypt", id[0], id[1], err)
			}
		}
	})
}

// TestKeyNeverPrints: however a key is formatted or logged, its bytes and
// its cipher's state stay out; its id shows.
func TestKeyNeverPrints(t *testing.T) {
	raw := bytes.Repeat([]byte{0xab}, KeySize)
	k, err := NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "key", k, "keyval", *k)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "key", k)
	out := fmt.Sprintf("%v %+v %#v %s %x %v %+v %#v", k, k, k, k, k, *k, *k, *k) + logged.String()
	for _, bad := range []string{"abab", "ABAB", "171, 171", "aead", "gcm"} {
		if strings.Contains(out, bad) {
			t.Fatalf("a formatted key shows %q: %s", bad, out)
		}
	}
	if !strings.Contains(out, k.ID()) {
		t.Fatalf("a formatted key does not show its id %s: %s", k.ID(), out)
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	k, created, err := LoadOrCreateKey(dir)
	if err != nil || !created {
		t.Fatalf("first start: %v, created %v", err, created)
	}
	path := filepath.Join(dir, KeyFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != KeySize {
		t.Fatalf("the key file: %v, %v", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the data directory holds %d files, want the key only", len(ents))
	}
	k2, created, err := LoadOrCreateKey(dir)
	if err != nil || created || k2.ID() != k.ID() {
		t.Fatalf("second start: %v, created %v, id %s want %s", err, created, k2.ID(), k.ID())
	}
	if _, err := k2.Open("s", "N", k.Seal("s", "N", []byte("v"))); err != nil {
		t.Fatalf("the reloaded key does not open the first one's values: %v", err)
	}

	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateKey(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Fatalf("mode %04o: %v; want a refusal that says to chmod 600", mode, err)
		}
	}
	os.Chmod(path, 0o400)
	if _, _, err := LoadOrCreateKey(dir); err != nil {
		t.Fatalf("mode 0400 (read-only for its owner): %v", err)
	}
	os.Chmod(path, 0o600)

	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "not 32 bytes") {
		t.Fatalf("a short key: %v", err)
	}
}
