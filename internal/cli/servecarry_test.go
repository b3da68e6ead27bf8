package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store/objstore"
)

// TestNodeConfigCarryFlags: --shared-data and --carry-max are checked,
// each mistake said with what to do.
func TestNodeConfigCarryFlags(t *testing.T) {
	node := serveFlags{store: "postgres://h/db", nodeID: "a", leaseTTL: 10e9}
	for _, tt := range []struct {
		name string
		f    func(*serveFlags)
		want int64
		err  string
	}{
		{"default", func(*serveFlags) {}, 0, ""},
		{"shared", func(f *serveFlags) { f.sharedData = true }, -1, ""},
		{"max", func(f *serveFlags) { f.carryMax = "2g" }, 2 << 30, ""},
		{"bad max", func(f *serveFlags) { f.carryMax = "lots" }, 0, "--carry-max \"lots\": give a size like 4g"},
		{"zero max", func(f *serveFlags) { f.carryMax = "0" }, 0, "--carry-max \"0\""},
		{"both", func(f *serveFlags) { f.sharedData, f.carryMax = true, "1g" }, 0, "give one of them"},
		{"lone shared", func(f *serveFlags) { f.nodeID, f.store = "", ""; f.sharedData = true }, 0, "give --node-id or --advertise too"},
		{"lone max", func(f *serveFlags) { f.nodeID, f.store = "", ""; f.carryMax = "1g" }, 0, "give --node-id or --advertise too"},
		{"takeover rate", func(f *serveFlags) { f.takeRate = 20 }, 0, ""},
		{"negative takeover rate", func(f *serveFlags) { f.takeRate = -1 }, 0, "--takeover-rate -1: give how many sessions a second"},
		{"lone takeover rate", func(f *serveFlags) { f.nodeID, f.store = "", ""; f.takeRate = 20 }, 0, "give --node-id or --advertise too"},
	} {
		f := node
		tt.f(&f)
		_, max, err := nodeConfig(f, "127.0.0.1:7777")
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.err)
		case tt.err == "" && max != tt.want:
			t.Errorf("%s: carry max %d, want %d", tt.name, max, tt.want)
		}
	}
}

// TestCheckpointStoreFlags: --checkpoint-store and its S3 flags are
// checked before the server starts, each mistake said with what to do:
// flags that do not go together, a credentials file others may read or
// inside the data directory, wrong keys and a missing bucket on a real
// S3 server (versitygw); a good bucket and a directory open.
func TestCheckpointStoreFlags(t *testing.T) {
	srv := testbin.StartS3Server(t)
	ctx := testbin.Context(t)
	data := t.TempDir()
	node := &session.NodeConfig{ID: "a"}
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte("[default]\naws_access_key_id = "+srv.AccessKey+"\naws_secret_access_key = not-it\n"), 0o600)
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("[default]\n"), 0o644)
	inData := filepath.Join(data, "credentials")
	os.WriteFile(inData, []byte("[default]\n"), 0o600)
	s3 := func(url, creds string) checkpointFlags {
		return checkpointFlags{store: url, endpoint: srv.Endpoint, credentials: creds}
	}
	for _, tt := range []struct {
		name  string
		f     checkpointFlags
		node  *session.NodeConfig
		carry int64
		want  string // "" : opens; "dir" or "s3": which
		err   string
	}{
		{"lone server", checkpointFlags{}, nil, 0, "", ""},
		{"default dir", checkpointFlags{}, node, 0, "dir", ""},
		{"dir", checkpointFlags{store: filepath.Join(dir, "cp")}, node, 0, "dir", ""},
		{"shared data", checkpointFlags{}, node, -1, "", ""},
		{"s3", s3("s3://"+srv.Bucket+"/p", srv.CredentialsFile), node, 0, "s3", ""},
		{"store on a lone server", checkpointFlags{store: dir}, nil, 0, "", "give --node-id or --advertise too"},
		{"store with shared data", checkpointFlags{store: dir}, node, -1, "", "--shared-data turns off"},
		{"endpoint without s3", checkpointFlags{store: dir, endpoint: srv.Endpoint}, node, 0, "", "give --checkpoint-store s3://bucket/prefix too"},
		{"credentials without store", checkpointFlags{credentials: srv.CredentialsFile}, node, 0, "", "give --checkpoint-store s3://bucket/prefix too"},
		{"other scheme", checkpointFlags{store: "gs://b/p"}, node, 0, "", "give a directory or s3://bucket/prefix"},
		{"bad s3 url", s3("s3:///p", srv.CredentialsFile), node, 0, "", "give s3://bucket or s3://bucket/prefix"},
		{"wrong keys", s3("s3://"+srv.Bucket+"/p", wrong), node, 0, "", "refused the credentials"},
		{"no bucket", s3("s3://nosuchbucket/p", srv.CredentialsFile), node, 0, "", "does not exist: create it"},
		{"credentials others read", s3("s3://"+srv.Bucket+"/p", open), node, 0, "", "chmod 600"},
		{"credentials in the data directory", s3("s3://"+srv.Bucket+"/p", inData), node, 0, "", "keep it outside"},
		{"missing credentials", s3("s3://"+srv.Bucket+"/p", filepath.Join(dir, "none")), node, 0, "", "no such file"},
	} {
		var stderr strings.Builder
		s, err := checkpointStore(ctx, tt.f, tt.node, tt.carry, data, &stderr)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "" && tt.want == "" && s != nil:
			t.Errorf("%s: opened %s, want no store", tt.name, s)
		case tt.want == "dir":
			if _, ok := s.(*objstore.Dir); !ok {
				t.Errorf("%s: %T, want a directory", tt.name, s)
			}
		case tt.want == "s3":
			if _, ok := s.(*objstore.S3); !ok {
				t.Errorf("%s: %T, want an S3 bucket", tt.name, s)
			}
		}
		if err != nil && strings.Contains(err.Error(), srv.SecretKey) {
			t.Errorf("%s: the error shows the secret key", tt.name)
		}
		if tt.name == "default dir" && !strings.Contains(stderr.String(), "nodes on other machines must share it") {
			t.Errorf("default dir: stderr %q, want a word on nodes on other machines", stderr.String())
		}
	}
}
