package testbin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Server is a real S3-compatible server of one test: versitygw (Versity
// S3 Gateway, Apache 2.0, built from the Go module proxy by scripts/setup)
// with its posix backend on a directory of the test, on a loopback port,
// signing requests with Signature V4 and one pair of keys. It has one
// bucket, Bucket.
type S3Server struct {
	// Endpoint is its URL (http://127.0.0.1:port).
	Endpoint string
	// Bucket exists; Dir is the posix backend's root (the bucket is
	// Dir/Bucket).
	Bucket, Dir string
	// AccessKey and SecretKey sign in; CredentialsFile holds them as an
	// AWS shared credentials file (profile default).
	AccessKey, SecretKey, CredentialsFile string

	cmd  *exec.Cmd
	done chan struct{}
}

// VersityGW is where the tests find versitygw: $HARVEST_VERSITYGW, else
// /opt/harvest/bin/versitygw (where scripts/setup installs it), else
// versitygw on PATH; "" when none is there.
func VersityGW() string {
	for _, p := range []string{os.Getenv("HARVEST_VERSITYGW"), "/opt/harvest/bin/versitygw"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	p, _ := exec.LookPath("versitygw")
	return p
}

// StartS3Server starts an S3Server for t and stops it, and removes its
// directory, when t ends. Without versitygw the test is skipped, or fails
// where testreq.S3 is required (in CI).
func StartS3Server(t testing.TB) *S3Server {
	t.Helper()
	return StartS3ServerOn(t, "127.0.0.1")
}

// StartS3ServerOn is StartS3Server listening on host (an IP address of
// this machine) instead of loopback: for nodes in other network
// namespaces (internal/netlab).
func StartS3ServerOn(t testing.TB, host string) *S3Server {
	t.Helper()
	bin := VersityGW()
	if bin == "" {
		testreq.Unavailable(t, testreq.S3, "no versitygw ($HARVEST_VERSITYGW, /opt/harvest/bin/versitygw or on PATH)")
	}
	dir := TempDir(t)
	s := &S3Server{Bucket: "harvest", Dir: filepath.Join(dir, "objects"), AccessKey: randomKey(10), SecretKey: randomKey(20),
		CredentialsFile: filepath.Join(dir, "credentials"), done: make(chan struct{})}
	if err := os.Mkdir(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.CredentialsFile, []byte(fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", s.AccessKey, s.SecretKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t, host)
	s.Endpoint = "http://" + addr
	log := &Buffer{}
	s.cmd = exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey, "--quiet", "posix", s.Dir)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting versitygw: %v", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }() // owned: Stop waits for done
	t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(t)
	for {
		err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
		if err == nil {
			break
		}
		select {
		case <-s.done:
			t.Fatalf("versitygw exited: %v\n%s", s.cmd.ProcessState, log.String())
		case <-ctx.Done():
			t.Fatalf("versitygw did not answer within a minute: %v\n%s", err, log.String())
		case <-time.After(20 * time.Millisecond): // it sends no notice when it listens
		}
	}
	return s
}

// Client is a client of the server with its keys.
func (s *S3Server) Client(t testing.TB) *minio.Client {
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Stop kills the server and waits for it.
func (s *S3Server) Stop() {
	s.cmd.Process.Kill()
	<-s.done
}

func randomKey(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// freePort is an address of host no one listens on (just closed; a
// server that loses it to another process fails to start, visibly).
func freePort(t testing.TB, host string) string {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
