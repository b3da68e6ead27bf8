// Package web is the browser UI that harvest serve serves at /: the page,
// its script and its stylesheet, embedded in the binary so the server needs
// nothing beside it and the page loads nothing from the network.
//
// The UI is TypeScript in frontend/, bundled by esbuild (frontend/build.mjs)
// into dist/, which is committed: building Harvest and running its Go tests
// needs no npm. scripts/setup rebuilds dist with npm ci && npm run build;
// TestDistMatchesSources fails when the sources changed and dist was not
// rebuilt. The page's API client is typed from server/openapi.json (npm run
// gen, checked by npm run build's type check), so it cannot call what the
// API does not have.
//
// The page talks to the API on the same origin, signed in with the cookie
// of POST /v1/auth/session (package server), so it holds no token. This
// package serves only static files, with a Content-Security-Policy that
// lets the page run its own script and reach its own origin, nothing else.
package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed dist
var dist embed.FS

// files are dist's, by path (/app.js), with their ETag.
type file struct {
	body  []byte
	etag  string
	ctype string
}

// Handler serves the UI: / (and any path that is not a file, for a
// reloaded deep link) is the page, /app.js and /app.css its assets. It
// answers GET and HEAD only.
func Handler() http.Handler {
	files := map[string]file{}
	fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := dist.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files[strings.TrimPrefix(p, "dist")] = file{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: contentType(p)}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, r.Method+" "+r.URL.Path+": the web UI takes GET and HEAD only (the API is under /v1)", http.StatusMethodNotAllowed)
			return
		}
		f, ok := files[r.URL.Path]
		if !ok || r.URL.Path == "/SOURCES" {
			f = files["/index.html"]
		}
		h := w.Header()
		h.Set("Content-Type", f.ctype)
		h.Set("ETag", f.etag)
		// Revalidate every time: the ETag makes that a 304, and a new
		// binary's page is never mixed with an old one's script.
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// xterm.js writes <style> elements, hence style-src 'unsafe-inline';
		// scripts are only our own bundle.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		if match := r.Header.Get("If-None-Match"); match != "" && match == f.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if r.Method == http.MethodHead {
			return
		}
		w.Write(f.body)
	})
}

func contentType(p string) string {
	switch {
	case strings.HasSuffix(p, ".html"):
		return "text/html; charset=utf-8"
	case strings.HasSuffix(p, ".js"):
		return "text/javascript; charset=utf-8"
	case strings.HasSuffix(p, ".css"):
		return "text/css; charset=utf-8"
	}
	return "text/plain; charset=utf-8"
}
