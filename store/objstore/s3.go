package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is an object store in a bucket of an S3-compatible service (github.com/minio/minio-go:
// Signature V4, multipart uploads). The object under key k is
// Prefix+k in Bucket.
type S3 struct {
	c        *minio.Client
	bucket   string
	prefix   string // "" or ending with "/"
	endpoint string
	partSize uint64
}

// S3Config says where an S3 store is and how to sign in to it.
type S3Config struct {
	// Bucket and Prefix, from s3://bucket/prefix.
	Bucket, Prefix string
	// Endpoint is the service's URL (http:// or https://) or host[:port]
	// (https); "" is AWS S3 (s3.amazonaws.com).
	Endpoint string
	// Region is the bucket's region ("": the service's default, or found).
	Region string
	// CredentialsFile is an AWS shared credentials file (INI: a [profile]
	// with aws_access_key_id and aws_secret_access_key), Profile its
	// section ("" : AWS_PROFILE or default). With no file the keys are
	// taken from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
	CredentialsFile, Profile string
	// PartSize is the size of a multipart upload's parts, so the memory an
	// upload holds (0: DefaultPartSize). An object up to it is one PUT.
	PartSize uint64
	// Transport, when set, carries the requests (tests).
	Transport http.RoundTripper
}

// DefaultPartSize is S3Config.PartSize's default.
const DefaultPartSize = 16 << 20

// ParseS3URL splits s3://bucket/prefix.
func ParseS3URL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("%q: give s3://bucket or s3://bucket/prefix", s)
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := CheckKey(prefix); err != nil {
			return "", "", fmt.Errorf("%q: the prefix: %w", s, err)
		}
		prefix += "/"
	}
	return u.Host, prefix, nil
}

// NewS3 signs in to the S3 store and checks the bucket is there and the
// credentials are accepted (a listing of one key), so that a mistake is
// said when the server starts, not at the first checkpoint.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("no bucket: give s3://bucket/prefix")
	}
	secure, host := true, cfg.Endpoint
	switch {
	case host == "":
		host = "s3.amazonaws.com"
	case strings.HasPrefix(host, "http://") || strings.HasPrefix(host, "https://"):
		u, err := url.Parse(host)
		if err != nil {
			return nil, errors.New("the endpoint is no URL: give one like https://s3.example.com:9000")
		}
		if u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
			return nil, fmt.Errorf("endpoint %q: give a URL like https://s3.example.com:9000 (no path, no query, no credentials: those go in the credentials file)", u.Redacted())
		}
		secure, host = u.Scheme == "https", u.Host
	case strings.ContainsAny(host, "/@?#"):
		return nil, errors.New("the endpoint is neither a URL nor a host[:port]: give one like https://s3.example.com:9000 (credentials go in the credentials file)")
	}
	var creds *credentials.Credentials
	if cfg.CredentialsFile != "" {
		creds = credentials.NewFileAWSCredentials(cfg.CredentialsFile, cfg.Profile)
	} else {
		creds = credentials.NewEnvAWS()
	}
	v, err := creds.GetWithContext(nil)
	if err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
		if cfg.CredentialsFile != "" {
			return nil, fmt.Errorf("the credentials file %s has no aws_access_key_id and aws_secret_access_key in its profile %q (or cannot be read): give an AWS shared credentials file", cfg.CredentialsFile, profileName(cfg.Profile))
		}
		return nil, errors.New("no credentials: give a credentials file (an AWS shared credentials file) or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	part := cfg.PartSize
	if part == 0 {
		part = DefaultPartSize
	}
	if part < 5<<20 {
		return nil, fmt.Errorf("part size %d: S3 takes parts of 5 MiB or more", part)
	}
	c, err := minio.New(host, &minio.Options{Creds: creds, Secure: secure, Region: cfg.Region, Transport: cfg.Transport})
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", host, err)
	}
	s := &S3{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix, endpoint: host, partSize: part}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for o := range c.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, MaxKeys: 1}) {
		if o.Err != nil {
			return nil, s.explain("checking the bucket", o.Err)
		}
		break
	}
	return s, nil
}

func profileName(p string) string {
	if p == "" {
		return "default"
	}
	return p
}

func (s *S3) String() string {
	return "s3://" + s.bucket + "/" + s.prefix + " at " + s.endpoint
}

// explain turns the service's refusals into what to do.
func (s *S3) explain(doing string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s in %s: %w", doing, s, err)
	}
	r := minio.ToErrorResponse(err)
	switch {
	// XAdminUserNotFound (404) is versitygw's answer to an unknown key.
	case slices.Contains([]string{"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AccessDenied",
		"AllAccessDisabled", "InvalidSecurity", "XAdminUserNotFound"}, r.Code), r.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s in %s: the service refused the credentials (%s: %s): check the credentials file's keys and that they may read, write, list and delete in the bucket", doing, s, r.Code, r.Message)
	case r.Code == "NoSuchBucket":
		return fmt.Errorf("%s in %s: the bucket %q does not exist: create it, or give an existing one", doing, s, s.bucket)
	case r.Code == "AuthorizationHeaderMalformed" || r.Code == "InvalidRegion":
		return fmt.Errorf("%s in %s: wrong region (%s: %s): give the bucket's region", doing, s, r.Code, r.Message)
	}
	var ne net.Error
	var ue *url.Error
	if errors.As(err, &ne) || errors.As(err, &ue) {
		return fmt.Errorf("%s in %s: cannot reach the service: %w (check the endpoint and the network)", doing, s, err)
	}
	return fmt.Errorf("%s in %s: %w", doing, s, err)
}

// Put uploads the object: one PUT up to PartSize, a multipart upload above
// (completed only when every part is stored; aborted on failure).
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) (Ref, error) {
	if err := CheckKey(key); err != nil {
		return Ref{}, err
	}
	if size < 0 {
		return Ref{}, fmt.Errorf("storing %s: size %d", key, size)
	}
	hr := newHashingReader(&sizedReader{r: r, left: size, key: key})
	info, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, hr, size, minio.PutObjectOptions{
		PartSize: s.partSize, NumThreads: 1, SendContentMd5: true,
		ContentType: "application/octet-stream",
	})
	if err != nil {
		// The client aborts a multipart upload that failed (detached from
		// ctx, which may be what failed), so its parts are not kept
		// either (TestKilledUpload checks).
		return Ref{}, s.explain("storing "+key, err)
	}
	// The client reads size bytes and no more: data longer than said is
	// found now, and its object removed (no reader has its reference).
	_, extra := hr.Read(make([]byte, 1))
	if info.Size != size || hr.n != size || extra != io.EOF {
		if err := s.Delete(context.WithoutCancel(ctx), key); err != nil {
			return Ref{}, err
		}
		if extra != nil && extra != io.EOF {
			return Ref{}, extra
		}
		return Ref{}, fmt.Errorf("storing %s in %s: %d bytes stored, %d read, want %d", key, s, info.Size, hr.n, size)
	}
	return Ref{Key: key, Size: size, SHA256: hr.sum()}, nil
}

// Open downloads the object, checked against ref.
func (s *S3) Open(ctx context.Context, ref Ref) (io.ReadCloser, error) {
	if err := CheckKey(ref.Key); err != nil {
		return nil, err
	}
	o, err := s.c.GetObject(ctx, s.bucket, s.prefix+ref.Key, minio.GetObjectOptions{})
	if err == nil {
		_, err = o.Stat()
	}
	if err != nil {
		if o != nil {
			o.Close()
		}
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("object %s in %s: %w", ref.Key, s, ErrNotFound)
		}
		return nil, s.explain("reading "+ref.Key, err)
	}
	return verify(o, ref), nil
}

// Delete removes the object.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return s.explain("deleting "+key, err)
	}
	return nil
}

// List lists the bucket under the store's prefix.
func (s *S3) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.c.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true})
	var ferr error
	for o := range ch {
		if ferr != nil {
			continue // drain after cancel
		}
		if o.Err != nil {
			ferr = s.explain("listing "+prefix, o.Err)
			cancel()
			continue
		}
		if err := fn(Info{Key: strings.TrimPrefix(o.Key, s.prefix), Size: o.Size, Modified: o.LastModified}); err != nil {
			ferr = err
			cancel()
		}
	}
	return ferr
}

var _ Store = (*S3)(nil)
