package web

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sourcesHash is frontend/build.mjs's hash of the UI's sources.
func sourcesHash(t *testing.T) string {
	t.Helper()
	files := []string{"build.mjs", "package.json", "package-lock.json", "tsconfig.json"}
	err := filepath.WalkDir("frontend/src", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, strings.TrimPrefix(filepath.ToSlash(p), "frontend/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("frontend", f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%s\n%s\n", f, hex.EncodeToString(sum[:]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestDistMatchesSources: the committed bundle was built from the
// committed sources.
func TestDistMatchesSources(t *testing.T) {
	b, err := dist.ReadFile("dist/SOURCES")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), sourcesHash(t); got != want {
		t.Errorf("web/dist was built from other sources (%s; they hash to %s): run cd web/frontend && npm ci && npm run build, and commit web/dist", got, want)
	}
}

// TestHandler: the page at / and at deep links, its assets with their
// types and the headers that confine it, 304 on a matching ETag, 405 for a
// method that is not GET or HEAD.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	t.Cleanup(srv.Close)
	get := func(path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, page := get("/")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(page, `<div id="app">`) {
		t.Fatalf("GET /: %s %q %.200s", resp.Status, resp.Header.Get("Content-Type"), page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if _, deep := get("/s/whatever"); deep != page {
		t.Errorf("a deep link is not the page")
	}
	for path, ctype := range map[string]string{"/app.js": "text/javascript; charset=utf-8", "/app.css": "text/css; charset=utf-8"} {
		resp, body := get(path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ctype || len(body) < 1000 {
			t.Errorf("GET %s: %s %q, %d bytes", path, resp.Status, resp.Header.Get("Content-Type"), len(body))
		}
		if !strings.Contains(page, path+"?v=") {
			t.Errorf("the page does not load %s by hash", path)
		}
		if r2, _ := get(path, "If-None-Match", resp.Header.Get("ETag")); r2.StatusCode != 304 {
			t.Errorf("GET %s with its ETag: %s, want 304", path, r2.Status)
		}
	}
	resp2, err := http.Post(srv.URL+"/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 405 || resp2.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %s, want 405 with Allow", resp2.Status)
	}
}
