package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyResolve(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "repos")
	data := filepath.Join(tmp, "data")
	other := filepath.Join(data, "workspaces", "session", "s-other", "app")
	for _, d := range []string{filepath.Join(root, "app", "sub"), filepath.Join(root, "with space"), other, filepath.Join(tmp, "outside")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "file"), []byte("x"), 0o644)
	for link, target := range map[string]string{"to-etc": "/etc", "to-data": data, "to-other": other, "to-app": filepath.Join(root, "app"), "to-proc": "/proc/self", "to-outside": "../outside"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := NewPolicy([]string{root}, []string{"git.example.com", "*.corp.example"}, []string{data})
	if err != nil {
		t.Fatal(err)
	}
	refused := "is not a directory this server copies for you: give an existing repository directory under " + root
	for _, tc := range []struct {
		src     string
		admin   bool
		want    string // resolved path or URL; "" when refused
		problem string // in the error
	}{
		// A user's directories: inside a root, resolved, or refused.
		{src: filepath.Join(root, "app"), want: filepath.Join(root, "app")},
		{src: filepath.Join(root, "app", "sub", ".."), want: filepath.Join(root, "app")},
		{src: filepath.Join(root, "to-app"), want: filepath.Join(root, "app")},
		{src: "/etc", problem: "/etc " + refused},
		{src: "/", problem: refused},
		{src: "/dev", problem: refused},
		{src: "/proc/self", problem: refused},
		{src: "/sys/kernel", problem: refused},
		{src: data, problem: refused},
		{src: other, problem: refused},
		{src: filepath.Join(root, "to-etc"), problem: refused},
		{src: filepath.Join(root, "to-data"), problem: refused},
		{src: filepath.Join(root, "to-other"), problem: refused},
		{src: filepath.Join(root, "to-proc"), problem: refused},
		{src: filepath.Join(root, "to-outside"), problem: refused},
		{src: filepath.Join(root, "..", "outside"), problem: refused},
		{src: "../", problem: "relative path: give an absolute path under " + root},
		{src: "app", problem: "relative path"},
		{src: filepath.Join(root, "missing"), problem: refused},
		{src: filepath.Join(root, "missing"), admin: true, problem: "does not exist on the server"},
		{src: filepath.Join(root, "file"), problem: refused},
		{src: filepath.Join(root, "file"), admin: true, problem: "is not a directory: give a repository's directory"},
		{src: filepath.Join(root, "to-etc"), admin: true, want: "/etc"},
		// One token: no control characters; no whitespace in a URL.
		{src: "https://git.example.com/x.git --upload-pack=touch", problem: "contains whitespace"},
		{src: "https://git.example.com/x.git\t", problem: "control character"},
		{src: "https://git.example.com/x.git --upload-pack=touch", admin: true, problem: "contains whitespace"},
		{src: filepath.Join(root, "app") + "\n", problem: "control character"},
		{src: " " + filepath.Join(root, "app"), problem: "begins or ends with whitespace"},
		{src: filepath.Join(root, "with space"), want: filepath.Join(root, "with space")},
		{src: "  ", problem: "empty"},
		// The admin: any directory but the never-copyable ones.
		{src: "/etc", admin: true, want: "/etc"},
		{src: "/", admin: true, problem: "contains /proc"},
		{src: "/proc/self", admin: true, problem: "inside /proc"},
		{src: data, admin: true, problem: "inside " + data},
		{src: filepath.Join(root, "to-other"), admin: true, problem: "inside " + data},
		{src: "relative", admin: true, problem: "relative path"},
		// URLs.
		{src: "https://git.example.com/acme/app.git", want: "https://git.example.com/acme/app.git"},
		{src: "https://GIT.example.com/acme/app.git", want: "https://GIT.example.com/acme/app.git"},
		{src: "http://a.corp.example/app.git", want: "http://a.corp.example/app.git"},
		{src: "https://evil.example.com/app.git", problem: "host evil.example.com is not one this server clones from (git.example.com, *.corp.example)"},
		{src: "https://corp.example.evil/app.git", problem: "is not one this server clones from"},
		{src: "https://user:tok@git.example.com/app.git", problem: "credentials in it"},
		{src: "ssh://git@git.example.com/app.git", problem: "https:// (or http://) URLs only, not ssh://"},
		{src: "git@git.example.com:acme/app.git", problem: "ssh address"},
		{src: "git://git.example.com/app.git", problem: "not git://"},
		{src: "file://" + filepath.Join(root, "app"), problem: "file:// URLs are not accepted from user tokens"},
		{src: "ext::sh -c touch% /tmp/pwned", problem: "relative path"},
		{src: "ssh://-oProxyCommand=touch%20/tmp/pwned/x", admin: true, problem: "not a valid URL"},
		{src: "ssh://-oProxyCommand=id/x", admin: true, problem: "no valid host"},
		{src: "ssh://git@git.example.com/app.git", admin: true, want: "ssh://git@git.example.com/app.git"},
		{src: "file://" + other, admin: true, problem: "inside " + data},
	} {
		src, err := p.Resolve(tc.src, tc.admin)
		who := "user"
		if tc.admin {
			who = "admin"
		}
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%s %q: got %+v, %v; want an error with %q", who, tc.src, src, err, tc.problem)
			}
			continue
		}
		if err != nil || src.String() != tc.want {
			t.Errorf("%s %q: got %q, %v; want %q", who, tc.src, src.String(), err, tc.want)
		}
	}

	// No roots: a user names no directory at all; no hosts: no URL.
	none, err := NewPolicy(nil, nil, []string{data})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.Resolve(filepath.Join(root, "app"), false); err == nil || !strings.Contains(err.Error(), "no --repo-root") {
		t.Errorf("no roots: %v", err)
	}
	if _, err := none.Resolve("https://git.example.com/a.git", false); err == nil || !strings.Contains(err.Error(), "no --git-host") {
		t.Errorf("no hosts: %v", err)
	}
	if _, err := none.Resolve(filepath.Join(root, "app"), true); err != nil {
		t.Errorf("no roots, the admin: %v", err)
	}

	// Checked again before the copy: a symlink swapped since is refused.
	link := filepath.Join(root, "swap")
	os.Symlink(filepath.Join(root, "app"), link)
	src, err := p.Resolve(link, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckCopy(src.Path); err != nil {
		t.Fatalf("CheckCopy of an unchanged source: %v", err)
	}
	os.RemoveAll(filepath.Join(root, "app"))
	os.Symlink(data, filepath.Join(root, "app"))
	if err := p.CheckCopy(src.Path); err == nil || !strings.Contains(err.Error(), "is no longer the directory the session was created on") || strings.Contains(err.Error(), data) {
		t.Fatalf("CheckCopy after a swap to the data dir: %v", err)
	}
}

// TestPolicyNoOracle: a user token learns nothing of the host from a
// refused directory: whether it exists, is a file or a symlink, where a
// link leads, or where the data directory is. Every refusal, the argument
// taken out, is one sentence.
func TestPolicyNoOracle(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "repos")
	data := filepath.Join(tmp, "data")
	for _, d := range []string{filepath.Join(root, "app"), filepath.Join(data, "workspaces", "s-1", "app")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "file"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "to-etc"))
	os.Symlink("/no/such/place", filepath.Join(root, "to-nowhere"))
	os.Symlink(data, filepath.Join(root, "to-data"))
	p, err := NewPolicy([]string{root}, nil, []string{data})
	if err != nil {
		t.Fatal(err)
	}
	answers := map[string][]string{}
	for _, src := range []string{
		"/root", "/root/nothere", "/etc/shadow", "/proc/self/exe", "/proc/self/cwd", "/",
		data, filepath.Join(data, "workspaces", "s-1", "app"), filepath.Join(data, "nothere"),
		filepath.Join(root, "to-etc"), filepath.Join(root, "to-nowhere"), filepath.Join(root, "to-data"),
		filepath.Join(root, "missing"), filepath.Join(root, "file"), filepath.Join(root, "..", "repos2"),
	} {
		_, err := p.Resolve(src, false)
		if err == nil {
			t.Fatalf("%s: accepted", src)
		}
		msg := strings.Replace(err.Error(), src, "SRC", 1)
		answers[msg] = append(answers[msg], src)
		for _, leak := range []string{data, "harvest", "/etc/", "which is"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: the answer %q gives away %q", src, err, leak)
			}
		}
	}
	if len(answers) != 1 {
		t.Errorf("refusals can be told apart: %d different answers: %q", len(answers), answers)
	}
}

func TestNewPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		roots, hosts []string
		want         string
	}{
		{roots: []string{"rel"}, want: "absolute path"},
		{roots: []string{"/nonexistent-harvest-root"}, want: "no such file"},
		{roots: []string{"/proc/self"}, want: "inside /proc"},
		{hosts: []string{"https://github.com"}, want: "no scheme"},
		{hosts: []string{""}, want: "give a host name"},
	} {
		if _, err := NewPolicy(tc.roots, tc.hosts, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("roots %v hosts %v: %v, want %q", tc.roots, tc.hosts, err, tc.want)
		}
	}
}
