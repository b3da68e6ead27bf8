package gh

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Defaults for Config.
const (
	DefaultAPIURL = "https://api.github.com/"
	DefaultWebURL = "https://github.com/"
)

// Config is how Harvest reaches GitHub. Exactly one of App (AppID and
// PrivateKey) and Token is set.
type Config struct {
	// APIURL is the REST API's base: https://api.github.com/ (the
	// default), https://HOST/api/v3/ for GitHub Enterprise Server, or the
	// stand-in's URL.
	APIURL string
	// WebURL is where repositories are served over git and shown in a
	// browser: https://github.com/ (the default) or https://HOST/.
	WebURL string

	// AppID and PrivateKey (PEM, PKCS#1 or PKCS#8) are a GitHub App's.
	AppID      int64
	PrivateKey []byte
	// Token is a personal access token (the token-file way).
	Token string

	// WebhookSecret checks webhook deliveries' signatures (an app's; a
	// repository webhook's in the token way). Empty: webhooks are refused.
	WebhookSecret []byte

	// HTTPClient makes the requests (nil: one whose answers must start
	// within 30 s; every call also takes a context).
	HTTPClient *http.Client
	// Now is the clock (nil: time.Now); tests move it to expire tokens.
	Now func() time.Time
	// Wait waits d or until ctx ends (nil: a timer), for a caller that
	// waits out one of GitHub's windows; tests pass one that moves Now.
	Wait func(ctx context.Context, d time.Duration) error
	// Reserve is the share of a primary rate limit background work
	// leaves for work people wait for (0: a tenth).
	Reserve float64
	// Logger gets what Harvest learns of GitHub's limits (nil: none).
	Logger *slog.Logger
}

// Files is a Config as an operator gives it: flags naming files, so no
// secret is ever on a command line or in a process table.
type Files struct {
	APIURL, WebURL    string
	AppID             int64
	PrivateKeyFile    string
	TokenFile         string
	WebhookSecretFile string
}

// Set reports whether any GitHub setting was given.
func (f Files) Set() bool {
	return f.APIURL != "" || f.WebURL != "" || f.AppID != 0 || f.PrivateKeyFile != "" ||
		f.TokenFile != "" || f.WebhookSecretFile != ""
}

// Load reads the files f names into a Config, checking each: an app needs
// both its id and its key, a token file excludes an app, secret files must
// not be readable by others, and URLs must be http(s). Every problem is
// reported at once.
func (f Files) Load() (Config, error) {
	var errs []error
	c := Config{APIURL: f.APIURL, WebURL: f.WebURL, AppID: f.AppID}
	app := f.AppID != 0 || f.PrivateKeyFile != ""
	switch {
	case app && f.TokenFile != "":
		errs = append(errs, errors.New("--github-token-file and --github-app-id/--github-app-key are exclusive: give an app or a token, not both"))
	case app && f.AppID == 0:
		errs = append(errs, errors.New("--github-app-key needs --github-app-id (the App ID on the app's settings page)"))
	case app && f.PrivateKeyFile == "":
		errs = append(errs, errors.New("--github-app-id needs --github-app-key (a private key file generated on the app's settings page)"))
	case !app && f.TokenFile == "":
		errs = append(errs, errors.New("GitHub needs credentials: --github-app-id with --github-app-key, or --github-token-file"))
	}
	if f.AppID < 0 {
		errs = append(errs, fmt.Errorf("--github-app-id %d: an app id is a positive number", f.AppID))
	}
	if f.PrivateKeyFile != "" {
		b, err := readSecret(f.PrivateKeyFile, "--github-app-key")
		if err == nil {
			if _, err = parseKey(b); err != nil {
				err = fmt.Errorf("--github-app-key %s: %w", f.PrivateKeyFile, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		c.PrivateKey = b
	}
	if f.TokenFile != "" {
		b, err := readSecret(f.TokenFile, "--github-token-file")
		if err == nil {
			c.Token = strings.TrimSpace(string(b))
			if c.Token == "" || strings.ContainsAny(c.Token, " \t\r\n") {
				err = fmt.Errorf("--github-token-file %s: the file must hold one token on one line", f.TokenFile)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if f.WebhookSecretFile != "" {
		b, err := readSecret(f.WebhookSecretFile, "--github-webhook-secret-file")
		if err == nil && len(strings.TrimSpace(string(b))) == 0 {
			err = fmt.Errorf("--github-webhook-secret-file %s is empty", f.WebhookSecretFile)
		}
		if err != nil {
			errs = append(errs, err)
		}
		c.WebhookSecret = []byte(strings.TrimRight(string(b), "\r\n"))
	}
	for _, u := range []struct{ flag, v string }{{"--github-api-url", f.APIURL}, {"--github-url", f.WebURL}} {
		if u.v == "" {
			continue
		}
		if err := checkURL(u.v); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", u.flag, u.v, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// readSecret reads a secret file that only its owner may read.
func readSecret(path, flag string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s is not a regular file", flag, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s %s is readable by others (mode %04o): chmod 600 %s", flag, path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return b, nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("give an http(s) URL")
	}
	if u.Host == "" {
		return errors.New("the URL has no host")
	}
	if u.User != nil {
		return errors.New("the URL must not carry credentials: give them as files")
	}
	return nil
}

// parseKey reads an RSA private key in PEM, PKCS#1 (GitHub's download) or
// PKCS#8.
func parseKey(b []byte) (*rsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("not a PEM file: give the .pem private key downloaded from the app's settings page")
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not an RSA private key (%s block): give the app's .pem private key", blk.Type)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an RSA private key: GitHub Apps sign with RSA", k)
	}
	return rk, nil
}

// webBase is the web URL with one trailing slash.
func (c Config) webBase() string {
	u := c.WebURL
	if u == "" {
		u = DefaultWebURL
	}
	return strings.TrimRight(u, "/") + "/"
}
