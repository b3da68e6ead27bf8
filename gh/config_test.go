package gh

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name string, b []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func testKey(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

// TestFilesLoad: every bad combination of settings is refused with a
// message that names the flag and what to do, all problems at once.
func TestFilesLoad(t *testing.T) {
	key := writeFile(t, "app.pem", testKey(t), 0o600)
	open := writeFile(t, "open.pem", testKey(t), 0o644)
	notKey := writeFile(t, "x.pem", []byte("hello"), 0o600)
	tok := writeFile(t, "token", []byte("ghp_abc\n"), 0o600)
	twoLines := writeFile(t, "token2", []byte("a\nb\n"), 0o600)
	secret := writeFile(t, "secret", []byte("s3cret\n"), 0o600)

	c, err := Files{AppID: 7, PrivateKeyFile: key, WebhookSecretFile: secret, APIURL: "http://127.0.0.1:1/"}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.AppID != 7 || len(c.PrivateKey) == 0 || string(c.WebhookSecret) != "s3cret" {
		t.Fatalf("loaded %+v", c)
	}
	if c, err := (Files{TokenFile: tok}).Load(); err != nil || c.Token != "ghp_abc" {
		t.Fatalf("token file: %q, %v", c.Token, err)
	}
	for _, tc := range []struct {
		f    Files
		want []string
	}{
		{Files{}, []string{"GitHub needs credentials"}},
		{Files{AppID: 7}, []string{"--github-app-id needs --github-app-key"}},
		{Files{PrivateKeyFile: key}, []string{"needs --github-app-id"}},
		{Files{AppID: 7, PrivateKeyFile: key, TokenFile: tok}, []string{"exclusive"}},
		{Files{AppID: 7, PrivateKeyFile: open}, []string{"readable by others", "chmod 600"}},
		{Files{AppID: 7, PrivateKeyFile: notKey}, []string{"not a PEM file"}},
		{Files{AppID: 7, PrivateKeyFile: "/nonexistent"}, []string{"--github-app-key", "no such file"}},
		{Files{TokenFile: twoLines}, []string{"one token on one line"}},
		{Files{TokenFile: tok, APIURL: "ftp://x", WebURL: "https://u:p@h/"}, []string{"--github-api-url", "http(s)", "--github-url", "credentials"}},
	} {
		_, err := tc.f.Load()
		if err == nil {
			t.Errorf("%+v: accepted", tc.f)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", tc.f, err, w)
			}
		}
	}
}

// TestReadDelivery: only a body signed with the secret (HMAC-SHA256) is
// accepted; the SHA-1 header alone is not; headers are checked.
func TestReadDelivery(t *testing.T) {
	secret := []byte("It's a Secret to Everybody")
	body := []byte("Hello, World!")
	// GitHub's documented example: this secret and body give this signature.
	const documented = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got := Sign(body, secret); got != documented {
		t.Fatalf("Sign = %s, want GitHub's documented %s", got, documented)
	}
	req := func(sig256, sig1, ct, id, ev string) *http.Request {
		r, _ := http.NewRequest("POST", "/", strings.NewReader(string(body)))
		for k, v := range map[string]string{"X-Hub-Signature-256": sig256, "X-Hub-Signature": sig1, "Content-Type": ct, "X-GitHub-Delivery": id, "X-GitHub-Event": ev} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		return r
	}
	d, err := ReadDelivery(req(documented, "", "application/json", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "issue_comment"), secret)
	if err != nil || d.Event != "issue_comment" || string(d.Payload) != string(body) {
		t.Fatalf("good delivery: %+v, %v", d, err)
	}
	for name, r := range map[string]*http.Request{
		"no signature":   req("", "", "application/json", "x", "ping"),
		"sha1 only":      req("", "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59", "application/json", "x", "ping"),
		"wrong":          req("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e18", "", "application/json", "x", "ping"),
		"not hex":        req("sha256=zz", "", "application/json", "x", "ping"),
		"another secret": req(Sign(body, []byte("other")), "", "application/json", "x", "ping"),
	} {
		if _, err := ReadDelivery(r, secret); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
	if _, err := ReadDelivery(req(documented, "", "application/json", "x", "ping"), nil); !errors.Is(err, ErrSignature) {
		t.Errorf("no secret configured: %v", err)
	}
	if _, err = ReadDelivery(req(documented, "", "application/x-www-form-urlencoded", "x", "ping"), secret); !errors.Is(err, ErrContentType) {
		t.Fatalf("a form body: %v, want ErrContentType", err)
	}
	_, err = ReadDelivery(req(documented, "", "application/json", "bad id!", ""), secret)
	if err == nil || errors.Is(err, ErrSignature) {
		t.Fatalf("bad headers: %v", err)
	}
	for _, w := range []string{"X-GitHub-Delivery", "X-GitHub-Event"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("bad headers: %q lacks %q", err, w)
		}
	}
}
