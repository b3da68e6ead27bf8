package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store/objstore"
	"github.com/spf13/pflag"
)

// harvest serve's --checkpoint-* flags: where the workspaces carried
// between nodes go (session.Config.Checkpoints, package store/objstore).

// checkpointFlags are serve's checkpoint store flags.
type checkpointFlags struct {
	store, endpoint, region, credentials, profile string
}

func addCheckpointFlags(fl *pflag.FlagSet, f *checkpointFlags) {
	fl.StringVar(&f.store, "checkpoint-store", "", "with several nodes: where the workspaces carried between nodes are kept: a directory (default DATA/checkpoints, which only nodes sharing it reach) or s3://bucket/prefix, a bucket of an S3-compatible object store every node reaches (nodes on separate machines need one)")
	fl.StringVar(&f.endpoint, "checkpoint-endpoint", "", "with an s3:// --checkpoint-store: the object store's URL, like https://minio.internal:9000 (default AWS S3)")
	fl.StringVar(&f.region, "checkpoint-region", "", "with an s3:// --checkpoint-store: the bucket's region (default: the service's)")
	fl.StringVar(&f.credentials, "checkpoint-credentials", "", "with an s3:// --checkpoint-store: an AWS shared credentials file (aws_access_key_id, aws_secret_access_key), mode 0600, outside the data directory (default: $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY); read by the server only, never by a box")
	fl.StringVar(&f.profile, "checkpoint-profile", "", "with --checkpoint-credentials: the file's profile (default: $AWS_PROFILE, else default)")
	annotate(fl, "checkpoint-credentials", configAnnotation, configSecretFile)
}

// checkpointStore opens serve's checkpoint store: nil when nothing is
// carried (a lone server, --shared-data: carryMax < 0).
func checkpointStore(ctx context.Context, f checkpointFlags, node *session.NodeConfig, carryMax int64, data string, stderr io.Writer) (objstore.Store, error) {
	s3 := strings.HasPrefix(f.store, "s3:")
	switch {
	case f.store != "" && node == nil:
		return nil, errors.New("--checkpoint-store is where workspaces carried between nodes are kept: give --node-id or --advertise too (a lone server carries none)")
	case f.store != "" && carryMax < 0:
		return nil, errors.New("--checkpoint-store keeps the workspaces carried between nodes, which --shared-data turns off: give one of them")
	case !s3 && (f.endpoint != "" || f.region != "" || f.credentials != "" || f.profile != ""):
		return nil, errors.New("--checkpoint-endpoint, --checkpoint-region, --checkpoint-credentials and --checkpoint-profile are for an S3 bucket: give --checkpoint-store s3://bucket/prefix too")
	case node == nil || carryMax < 0:
		return nil, nil
	}
	if !s3 {
		dir := f.store
		if dir == "" {
			dir = filepath.Join(data, session.DefaultCheckpointDir)
			fmt.Fprintf(stderr, "harvest: workspaces carried between nodes are kept in %s: nodes on other machines must share it, or give every node --checkpoint-store s3://bucket/prefix\n", dir)
		}
		if strings.Contains(dir, "://") {
			return nil, fmt.Errorf("--checkpoint-store %q: give a directory or s3://bucket/prefix", f.store)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("--checkpoint-store %q: %w", dir, err)
		}
		d, err := objstore.NewDir(abs)
		if err != nil {
			return nil, fmt.Errorf("--checkpoint-store %s: %w", abs, err)
		}
		return d, nil
	}
	bucket, prefix, err := objstore.ParseS3URL(f.store)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-store %w", err)
	}
	if f.credentials != "" {
		if err := checkCredentialsFile(f.credentials, data); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := objstore.NewS3(ctx, objstore.S3Config{Bucket: bucket, Prefix: prefix, Endpoint: f.endpoint, Region: f.region,
		CredentialsFile: f.credentials, Profile: f.profile})
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-store %s: %w", f.store, err)
	}
	return s, nil
}

// checkCredentialsFile refuses a credentials file that others may read, or
// that is below the data directory (where the workspaces boxes see are).
func checkCredentialsFile(path, data string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("--checkpoint-credentials %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("--checkpoint-credentials: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("--checkpoint-credentials %s: mode %04o lets others read the keys: chmod 600 it", abs, fi.Mode().Perm())
	}
	if d, err := filepath.Abs(data); err == nil {
		if rel, err := filepath.Rel(d, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("--checkpoint-credentials %s is in the data directory %s, where sessions' workspaces are: keep it outside", abs, d)
		}
	}
	return nil
}
