package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store/objstore"
)

// Every test runs against both stores: a directory and a bucket of a real
// S3 server (versitygw).
func stores(t *testing.T) (map[string]objstore.Store, *testbin.S3Server) {
	d, err := objstore.NewDir(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	srv := testbin.StartS3Server(t)
	return map[string]objstore.Store{"dir": d, "s3": newS3(t, srv, "prefix/a")}, srv
}

func newS3(t *testing.T, srv *testbin.S3Server, prefix string) *objstore.S3 {
	t.Helper()
	s, err := objstore.NewS3(testbin.Context(t), objstore.S3Config{Bucket: srv.Bucket, Prefix: prefix + "/", Endpoint: srv.Endpoint,
		CredentialsFile: srv.CredentialsFile, PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func keys(t *testing.T, s objstore.Store, prefix string) []string {
	t.Helper()
	var ks []string
	if err := s.List(testbin.Context(t), prefix, func(i objstore.Info) error {
		ks = append(ks, i.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestRoundTrip: objects small (one PUT) and large (a multipart upload of
// three parts) come back as stored, listed under their prefix, checked
// against their reference, and gone once deleted.
func TestRoundTrip(t *testing.T) {
	all, _ := stores(t)
	for name, s := range all {
		t.Run(name, func(t *testing.T) {
			ctx := testbin.Context(t)
			for _, n := range []int{0, 1000, 12<<20 + 7} {
				data := random(n)
				key := "packs/" + sum(data)
				ref, err := s.Put(ctx, key, bytes.NewReader(data), int64(n))
				if err != nil {
					t.Fatalf("put %d bytes: %v", n, err)
				}
				if want := (objstore.Ref{Key: key, Size: int64(n), SHA256: sum(data)}); ref != want {
					t.Errorf("put %d bytes: %+v, want %+v", n, ref, want)
				}
				got, err := objstore.ReadAll(ctx, s, ref, 64<<20)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes back: %d bytes, %v", n, len(got), err)
				}
				if ks := keys(t, s, "packs/"); len(ks) != 1 || ks[0] != key {
					t.Errorf("listing packs/: %v, want [%s]", ks, key)
				}
				if ks := keys(t, s, "other/"); len(ks) != 0 {
					t.Errorf("listing other/: %v, want nothing", ks)
				}
				if err := s.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
				if err := s.Delete(ctx, key); err != nil {
					t.Errorf("deleting it twice: %v", err)
				}
				if _, err := s.Open(ctx, ref); !errors.Is(err, objstore.ErrNotFound) {
					t.Errorf("open after delete: %v, want ErrNotFound", err)
				}
			}
		})
	}
}

// TestChecked: an object read against a reference whose sha256 or size is
// not its own fails with ErrCorrupt, never returns it as good.
func TestChecked(t *testing.T) {
	all, _ := stores(t)
	for name, s := range all {
		t.Run(name, func(t *testing.T) {
			ctx := testbin.Context(t)
			data := random(5000)
			ref, err := s.Put(ctx, "m/1", bytes.NewReader(data), 5000)
			if err != nil {
				t.Fatal(err)
			}
			for what, bad := range map[string]objstore.Ref{
				"sha256":  {Key: ref.Key, Size: ref.Size, SHA256: sum([]byte("other"))},
				"shorter": {Key: ref.Key, Size: ref.Size - 1, SHA256: ref.SHA256},
				"longer":  {Key: ref.Key, Size: ref.Size + 1, SHA256: ref.SHA256},
			} {
				rc, err := s.Open(ctx, bad)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
				if !errors.Is(err, objstore.ErrCorrupt) {
					t.Errorf("reading against a wrong %s: %v, want ErrCorrupt", what, err)
				}
				if _, err := objstore.ReadAll(ctx, s, bad, 1<<20); err == nil {
					t.Errorf("ReadAll against a wrong %s: no error", what)
				}
			}
		})
	}
}

// stalling yields n bytes, then blocks until ctx is done: a writer killed
// in the middle of an upload.
type stalling struct {
	ctx     context.Context
	n       int
	stalled atomic.Bool
}

func (s *stalling) Read(p []byte) (int, error) {
	if s.n == 0 {
		s.stalled.Store(true)
		<-s.ctx.Done()
		return 0, s.ctx.Err()
	}
	n := min(len(p), s.n)
	s.n -= n
	return n, nil
}

// TestKilledUpload: an upload that dies in the middle (its context
// cancelled after more than a part was sent), or whose data is shorter
// or longer than said, leaves no object, not even a part of one, and the
// object it was to replace is still whole.
func TestKilledUpload(t *testing.T) {
	all, srv := stores(t)
	for name, s := range all {
		t.Run(name, func(t *testing.T) {
			ctx := testbin.Context(t)
			old := random(100)
			oldRef, err := s.Put(ctx, "m/replaced", bytes.NewReader(old), 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"m/new", "m/replaced"} {
				cctx, cancel := context.WithCancel(ctx)
				r := &stalling{ctx: cctx, n: 7 << 20}
				done := make(chan error, 1)
				go func() { // owned: waited for below
					_, err := s.Put(cctx, key, r, 20<<20)
					done <- err
				}()
				testbin.WaitFor(t, time.Minute, "the upload to read 7 MiB", r.stalled.Load)
				cancel()
				if err := <-done; err == nil {
					t.Fatalf("%s: a cancelled upload succeeded", key)
				}
			}
			if _, err := s.Put(ctx, "m/short", bytes.NewReader(random(10)), 11); err == nil {
				t.Error("an upload of 10 bytes said to be 11 succeeded")
			}
			if _, err := s.Put(ctx, "m/long", bytes.NewReader(random(12)), 11); err == nil {
				t.Error("an upload of 12 bytes said to be 11 succeeded")
			}
			if ks := keys(t, s, "m/"); len(ks) != 1 || ks[0] != "m/replaced" {
				t.Errorf("objects after the failed uploads: %v, want only m/replaced", ks)
			}
			if got, err := objstore.ReadAll(ctx, s, oldRef, 1000); err != nil || !bytes.Equal(got, old) {
				t.Errorf("the object a failed upload was to replace: %v", err)
			}
			if name == "s3" {
				// Nor a multipart upload left open (its parts kept).
				for u := range srv.Client(t).ListIncompleteUploads(ctx, srv.Bucket, "", true) {
					t.Errorf("a multipart upload left open: %+v", u)
				}
			} else {
				var tmp []string
				filepath.WalkDir(s.String(), func(p string, e fs.DirEntry, err error) error {
					if err == nil && strings.HasPrefix(e.Name(), ".tmp-") {
						tmp = append(tmp, p)
					}
					return nil
				})
				if len(tmp) > 0 {
					t.Errorf("temporary files left: %v", tmp)
				}
			}
		})
	}
}

// TestS3Refusals: wrong keys, a missing bucket, a missing credentials
// file and a bad endpoint are said when the store is opened, with what
// to do, and never show the secret.
func TestS3Refusals(t *testing.T) {
	srv := testbin.StartS3Server(t)
	ctx := testbin.Context(t)
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte("[default]\naws_access_key_id = "+srv.AccessKey+"\naws_secret_access_key = notthesecret\n"), 0o600)
	unknown := filepath.Join(dir, "unknown")
	os.WriteFile(unknown, []byte("[default]\naws_access_key_id = NOBODY\naws_secret_access_key = notthesecret\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("[other]\naws_access_key_id = x\n"), 0o600)
	for _, tt := range []struct {
		name string
		cfg  objstore.S3Config
		want string
	}{
		{"wrong secret", objstore.S3Config{Bucket: srv.Bucket, Endpoint: srv.Endpoint, CredentialsFile: wrong}, "refused the credentials"},
		{"unknown key", objstore.S3Config{Bucket: srv.Bucket, Endpoint: srv.Endpoint, CredentialsFile: unknown}, "refused the credentials"},
		{"no bucket", objstore.S3Config{Bucket: "nosuchbucket", Endpoint: srv.Endpoint, CredentialsFile: srv.CredentialsFile}, "does not exist: create it"},
		{"no keys in the file", objstore.S3Config{Bucket: srv.Bucket, Endpoint: srv.Endpoint, CredentialsFile: empty}, "has no aws_access_key_id"},
		{"no file", objstore.S3Config{Bucket: srv.Bucket, Endpoint: srv.Endpoint, CredentialsFile: filepath.Join(dir, "none")}, "has no aws_access_key_id"},
		{"endpoint with a path", objstore.S3Config{Bucket: srv.Bucket, Endpoint: srv.Endpoint + "/x", CredentialsFile: srv.CredentialsFile}, "no path"},
		{"endpoint with credentials", objstore.S3Config{Bucket: srv.Bucket, Endpoint: "http://key:notthesecret@" + strings.TrimPrefix(srv.Endpoint, "http://"), CredentialsFile: srv.CredentialsFile}, "no credentials"},
	} {
		_, err := objstore.NewS3(ctx, tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), srv.SecretKey) || strings.Contains(err.Error(), "notthesecret")) {
			t.Errorf("%s: the error shows a secret: %v", tt.name, err)
		}
	}
}

func TestParseS3URL(t *testing.T) {
	for in, want := range map[string][2]string{
		"s3://b":          {"b", ""},
		"s3://b/":         {"b", ""},
		"s3://b/p/q":      {"b", "p/q/"},
		"s3://b/p/q/":     {"b", "p/q/"},
		"s3://b/../x":     {"", ""},
		"s3://key@b/p":    {"", ""},
		"http://b/p":      {"", ""},
		"s3:///p":         {"", ""},
		"s3://b/p?x=1":    {"", ""},
		"s3://b/p q":      {"", ""},
		"s3://b/p//q":     {"", ""},
		"s3://b.example/": {"b.example", ""},
	} {
		b, p, err := objstore.ParseS3URL(in)
		if want[0] == "" {
			if err == nil {
				t.Errorf("%q: %q %q, want an error", in, b, p)
			}
			continue
		}
		if err != nil || b != want[0] || p != want[1] {
			t.Errorf("%q: %q %q %v, want %q %q", in, b, p, err, want[0], want[1])
		}
	}
}
