package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

const (
	// DebianWheels is where Debian keeps the wheels of pip, setuptools and
	// wheel (python3-pip-whl, python3-setuptools-whl, python3-wheel-whl)
	// that venv and PyIndex use.
	DebianWheels = "/usr/share/python-wheels"
	// DebianPython is Debian's python3, the one those wheels are built
	// for: Debian patches setuptools for its own Python, and the patched
	// wheel fails to build anything under another (pyenv's, say).
	DebianPython = "/usr/bin/python3"
)

// Python3 returns DebianPython. When it is missing the test is skipped, or
// fails where testreq.Toolchains is required (in CI).
func Python3(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(DebianPython); err != nil {
		testreq.Unavailable(t, testreq.Toolchains, "%s is missing (scripts/setup installs python3)", DebianPython)
	}
	return DebianPython
}

// PyIndex serves a PEP 503 "simple" package index over HTTP on loopback
// and returns its URL (http://127.0.0.1:PORT/simple), for pip's
// --index-url or PIP_INDEX_URL: PyPI is out of reach, so this is what a
// Python project's `pip install` talks to in the tests.
//
// The index holds setuptools and wheel, the build backend pip fetches
// into an isolated build environment (Debian's wheels, from DebianWheels),
// and a wheel of each source tree in sdists (.tar.gz files with one
// top-level directory, as PyPI serves sdists), built at test time by
// python's pip (a venv's python made from Python3) in an isolated build
// environment that it installs from this same index, without a cache. When python or
// Debian's wheels are missing the test is skipped (or fails where
// testreq.Toolchains is required, in CI). The server stops when the test ends.
func PyIndex(t testing.TB, python string, sdists ...string) string {
	t.Helper()
	return PyIndexAt(t, "127.0.0.1:0", python, sdists...)
}

// PyIndexAt is PyIndex listening on addr (IP:PORT; port 0 for any), like
// an internal package index on the host's network (HostAddr).
func PyIndexAt(t testing.TB, addr, python string, sdists ...string) string {
	t.Helper()
	files := t.TempDir()
	for _, prefix := range []string{"setuptools-", "wheel-"} {
		found, _ := filepath.Glob(filepath.Join(DebianWheels, prefix+"*.whl"))
		if len(found) == 0 {
			testreq.Unavailable(t, testreq.Toolchains, "no %s*.whl in %s (scripts/setup installs python3-venv and python3-wheel-whl)", prefix, DebianWheels)
		}
		for _, f := range found {
			copyFile(t, f, filepath.Join(files, filepath.Base(f)))
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the package index: %v", err)
	}
	srv := httptest.NewUnstartedServer(pyIndexHandler(files))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	url := srv.URL + "/simple"
	for _, sdist := range sdists {
		src := t.TempDir()
		cmd := exec.Command("tar", "-xzf", sdist, "-C", src)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("unpacking %s: %v\n%s", sdist, err, out)
		}
		top, err := os.ReadDir(src)
		if err != nil || len(top) != 1 || !top[0].IsDir() {
			t.Fatalf("%s does not hold one top-level directory", sdist)
		}
		cmd = exec.Command(python, "-m", "pip", "wheel", "--use-pep517", "--no-deps", "--no-cache-dir", "--index-url", url,
			"--wheel-dir", files, filepath.Join(src, top[0].Name()))
		cmd.Env = append(PipEnv(t.TempDir()), "PIP_TRUSTED_HOST="+ln.Addr().(*net.TCPAddr).IP.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building a wheel of %s: %v\n%s", sdist, err, out)
		}
	}
	return url
}

// HostAddr returns an IPv4 address of this host that is not loopback or
// link-local (an interface's, docker0's if nothing else), for a server
// that boxes reach the way they would a service on the host's network.
func HostAddr(t testing.TB) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			if ip := p.Addr(); ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip
			}
		}
	}
	t.Fatalf("this host has no IPv4 address but loopback: %v", addrs)
	return netip.Addr{}
}

// PipEnv is an environment for pip in tests: the host's PATH, a HOME of
// its own, no configuration files, no other index, no version check.
func PipEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C.UTF-8",
		"PIP_CONFIG_FILE=" + os.DevNull, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1",
		"PYTHONDONTWRITEBYTECODE=1",
	}
}

// pyIndexHandler serves the wheels in dir as a PEP 503 index under
// /simple/ and the files themselves under /files/. It reads dir on every
// request, so wheels built after the server started are listed.
func pyIndexHandler(dir string) http.Handler {
	mux := http.NewServeMux()
	projects := func() map[string][]string {
		m := map[string][]string{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if n := e.Name(); strings.HasSuffix(n, ".whl") {
				p := normalizePyName(strings.SplitN(n, "-", 2)[0])
				m[p] = append(m[p], n)
			}
		}
		return m
	}
	page := func(w http.ResponseWriter, title string, links []string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>%s</title></head><body>\n", html.EscapeString(title))
		for _, l := range links {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w, "</body></html>")
	}
	mux.HandleFunc("GET /simple/{$}", func(w http.ResponseWriter, r *http.Request) {
		var links []string
		for p := range projects() {
			links = append(links, fmt.Sprintf(`<a href="%s/">%s</a>`, p, p))
		}
		slices.Sort(links)
		page(w, "Simple index", links)
	})
	mux.HandleFunc("GET /simple/{project}/{$}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("project")
		if p := normalizePyName(name); p != name {
			http.Redirect(w, r, "/simple/"+p+"/", http.StatusMovedPermanently)
			return
		}
		wheels := projects()[name]
		if len(wheels) == 0 {
			http.NotFound(w, r)
			return
		}
		slices.Sort(wheels)
		var links []string
		for _, f := range wheels {
			sum, err := fileSHA256(filepath.Join(dir, f))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			links = append(links, fmt.Sprintf(`<a href="/files/%s#sha256=%s">%s</a><br>`, f, sum, html.EscapeString(f)))
		}
		page(w, "Links for "+name, links)
	})
	mux.Handle("GET /files/", http.StripPrefix("/files/", http.FileServer(http.Dir(dir))))
	return mux
}

var pyNameSeparators = regexp.MustCompile(`[-_.]+`)

// normalizePyName is PEP 503's normalized project name.
func normalizePyName(name string) string {
	return strings.ToLower(pyNameSeparators.ReplaceAllString(name, "-"))
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
