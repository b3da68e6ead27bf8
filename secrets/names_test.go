package secrets

import (
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	good := map[string]string{
		"repo:octocat/Hello-World": "repo:octocat/hello-world",
		"repo:a/b.c_d-e":           "repo:a/b.c_d-e",
		"user:tok-0123456789ab":    "user:tok-0123456789ab",
		"user:me":                  "user:me",
	}
	for in, want := range good {
		sc, err := ParseScope(in)
		if err != nil || sc.String() != want {
			t.Errorf("ParseScope(%q) = %q, %v; want %q", in, sc, err, want)
		}
	}
	for _, in := range []string{"", "repo:", "repo:octo", "repo:/x", "repo:-o/x", "repo:o/x/y", "repo:o/..", "repo:o/.", "user:", "user:a b", "user:../x",
		"org:x", "REPO:o/x", "octo/hello", strings.Repeat("x", 1000)} {
		if _, err := ParseScope(in); err == nil {
			t.Errorf("ParseScope(%q) accepted", in)
		} else if len(err.Error()) > 400 {
			t.Errorf("ParseScope(%q): an error of %d bytes", in, len(err.Error()))
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, n := range []string{"A", "_", "NPM_TOKEN", "A1", "_X_9", strings.Repeat("A", 128)} {
		if err := CheckName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", "1A", "a", "npm_token", "A-B", "A B", "A=B", "É", strings.Repeat("A", 129)} {
		if err := CheckName(n); err == nil {
			t.Errorf("%q accepted", n)
		}
	}
	if err := CheckName("npm_token"); err == nil || !strings.Contains(err.Error(), "did you mean NPM_TOKEN?") {
		t.Errorf("lower case: %v", err)
	}
}

func TestCheckValue(t *testing.T) {
	const canary = "canary-value-7f3a"
	for _, v := range []string{"x", strings.Repeat("x", MaxValue), "line\nbreak", "ünïcode"} {
		if err := CheckValue(v); err != nil {
			t.Errorf("%d bytes: %v", len(v), err)
		}
	}
	for _, v := range []string{"", canary + strings.Repeat("x", MaxValue), canary + "\x00", canary + "\xff"} {
		err := CheckValue(v)
		if err == nil {
			t.Errorf("%q accepted", v[:min(len(v), 40)])
		} else if strings.Contains(err.Error(), canary) {
			t.Errorf("the error quotes the value: %v", err)
		}
	}
}
