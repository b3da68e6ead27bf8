package docker_test

import (
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sandbox/docker"
)

// TestDefaultImageToolchains: the default image (scripts/build-base-image)
// carries what real repositories need to run their tests, and each tool works
// for the box user, offline (boxes have no network by default): a Python venv
// with pip, Node.js and npm, a Go new enough for today's modules that builds a
// module, a C compiler that links, and the command-line tools agents reach for.
func TestDefaultImageToolchains(t *testing.T) {
	t.Parallel()
	p, _ := newProviderFor(t, docker.DefaultImage)
	ctx := testCtx(t)
	spec, _ := withWorkspace(t)
	sb := start(t, ctx, p, spec)

	for _, c := range []struct {
		name, script string
		want         []string // substrings of the output, in order
	}{
		{"user and network", `id -u; ls /sys/class/net`, []string{"1000", "lo"}},
		{"python", `python3 -m venv /tmp/v && /tmp/v/bin/pip --version`, []string{"pip ", "/tmp/v/"}},
		{"node", `node --version && npm --version && node -e 'console.log(6*7)'`, []string{"v", "\n", "42"}},
		// GOTOOLCHAIN=local: a go.mod asking for Go 1.22 must build with the
		// image's own Go (Debian bookworm's 1.19 would fail here).
		{"go", `go version && mkdir /tmp/hello && cd /tmp/hello &&
			printf 'module example.com/hello\n\ngo 1.22\n' >go.mod &&
			printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from go") }\n' >main.go &&
			GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local go build -o hello . && ./hello`,
			[]string{"go version go1.", "hello from go"}},
		{"cc", `cc --version && printf '#include <stdio.h>\nint main(void) { puts("hello from c"); return 0; }\n' |
			cc -x c -o /tmp/c - && /tmp/c`, []string{"cc (", "hello from c"}},
		{"rg", `rg --version`, []string{"ripgrep "}},
		{"jq", `echo '{"a":[1,2]}' | jq -c .a && jq --version`, []string{"[1,2]", "jq-1."}},
		{"fd", `fd --version && fd -t f -g os-release /usr/lib`, []string{"fdfind ", "/usr/lib/os-release"}},
		{"git", `git --version`, []string{"git version "}},
		{"curl", `curl --version`, []string{"curl "}},
		{"make", `make --version`, []string{"GNU Make"}},
	} {
		out, st := sh(t, ctx, sb, c.script)
		rest, ok := out, st.Success()
		for _, w := range c.want {
			var found bool
			_, rest, found = strings.Cut(rest, w)
			ok = ok && found
		}
		if !ok {
			t.Errorf("%s: %s exited %v, want output with %q:\n%s", c.name, c.script, st, c.want, out)
		}
	}
}
