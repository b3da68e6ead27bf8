package gitproxy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestPushRefused: each push against the policy, or without a valid
// credential, fails in the box with the reason on git's stderr and leaves
// the upstream untouched: no push reaches it.
func TestPushRefused(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Repo) // the grant's repository
		// setup runs in the clone before the push (tags, a bad token);
		// it returns the token to push with.
		setup func(h *harness, dir, tok string, revoke func()) string
		push  []string
		want  []string      // on git's stderr
		kind  RefusalKind   // OnRefuse's, "" when none is expected
		kinds []RefusalKind // per ref, when several
	}{
		{
			name: "default branch",
			push: []string{"HEAD:main"},
			want: []string{"! [remote rejected] HEAD -> main (harvest: pushing to the default branch main is not allowed; push to harvest/sess-abc)",
				"remote: harvest: pushing to the default branch main is not allowed"},
			kind: RefusedDefaultBranch,
		},
		{
			name: "default branch even when listed",
			mod:  func(r *Repo) { r.Branches = append(r.Branches, "main") },
			push: []string{"HEAD:main"},
			want: []string{"[remote rejected] HEAD -> main (harvest: pushing to the default branch main is not allowed; push to harvest/sess-abc)"},
			kind: RefusedDefaultBranch,
		},
		{
			name: "another branch",
			push: []string{"HEAD:feature"},
			want: []string{"[remote rejected] HEAD -> feature (harvest: this session may not push to branch feature; push to harvest/sess-abc)"},
			kind: RefusedBranch,
		},
		{
			name: "delete",
			push: []string{"--delete", testBranch},
			want: []string{"[remote rejected] harvest/sess-abc (harvest: deleting branches is not allowed (harvest/sess-abc); push to harvest/sess-abc)"},
			kind: RefusedDelete,
		},
		{
			name: "tag",
			setup: func(h *harness, dir, tok string, _ func()) string {
				h.host(dir, "tag", "v1")
				return tok
			},
			push: []string{"v1"},
			want: []string{"[remote rejected] v1 -> v1 (harvest: pushing tags is not allowed; push to harvest/sess-abc)"},
			kind: RefusedTag,
		},
		{
			name: "other ref",
			push: []string{"HEAD:refs/notes/x"},
			want: []string{"(harvest: only branches may be pushed, not refs/notes/x; push to harvest/sess-abc)"},
			kind: RefusedRef,
		},
		{
			name: "protected branch",
			mod: func(r *Repo) {
				r.Protected = func(_ context.Context, b string) (bool, error) { return b == testBranch, nil }
			},
			push: []string{"HEAD:" + testBranch},
			want: []string{"[remote rejected] HEAD -> harvest/sess-abc (harvest: branch harvest/sess-abc is protected; push to harvest/sess-abc)"},
			kind: RefusedProtected,
		},
		{
			name: "protection unknown",
			mod: func(r *Repo) {
				r.Protected = func(context.Context, string) (bool, error) { return false, errors.New("GitHub API: 502") }
			},
			push: []string{"HEAD:" + testBranch},
			want: []string{"(harvest: could not check whether branch harvest/sess-abc is protected, so it was not pushed; try again)"},
			kind: RefusedProtected,
		},
		{
			name:  "one ref refused refuses all",
			push:  []string{"HEAD:" + testBranch, "HEAD:main"},
			want:  []string{"[remote rejected] HEAD -> main (harvest: pushing to the default branch", "[remote rejected] HEAD -> harvest/sess-abc (harvest: not pushed because another ref of this push was refused"},
			kind:  RefusedDefaultBranch,
			kinds: []RefusalKind{RefusedWithOthers, RefusedDefaultBranch},
		},
		{
			name: "read-only repository",
			mod:  func(r *Repo) { r.ReadOnly = true },
			push: []string{"HEAD:" + testBranch},
			want: []string{"remote: harvest: owner/name is read-only for this session; it may fetch from it but not push"},
			kind: RefusedReadOnly,
		},
		{
			name: "other repository",
			setup: func(h *harness, dir, tok string, _ func()) string {
				h.host(dir, "remote", "add", "other", "https://github.com/owner/other.git")
				return tok
			},
			push: []string{"other", "HEAD:" + testBranch},
			want: []string{"remote: harvest: this session has no access to owner/other; it may use owner/name", "/owner/other.git/' not found"},
			kind: RefusedRepo,
		},
		{
			name: "wrong credential",
			setup: func(h *harness, dir, tok string, _ func()) string {
				return tokenPrefix + strings.Repeat("A", 43)
			},
			push: []string{"HEAD:" + testBranch},
			want: []string{"remote: harvest: the git credentials are not valid", "fatal: Authentication failed for 'http://127.0.0.1:"},
		},
		{
			name: "revoked grant",
			setup: func(h *harness, dir, tok string, revoke func()) string {
				revoke()
				return tok
			},
			push: []string{"HEAD:" + testBranch},
			want: []string{"remote: harvest: the git credentials are not valid", "fatal: Authentication failed for 'http://127.0.0.1:"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.seed(testRepo, testBranch)
			h.seed("owner/other")
			r := h.repo(testRepo)
			if c.mod != nil {
				c.mod(&r)
			}
			tok, revoke := h.grant(r)
			dir := h.clone(tok, testRepo)
			h.commit(dir, "change", []byte("change\n"))
			if c.setup != nil {
				tok = c.setup(h, dir, tok, revoke)
			}
			before, otherBefore, posts := h.refs(testRepo), h.refs("owner/other"), h.up.receivePacks()

			args := []string{"push", "origin"}
			if c.push[0] == "other" {
				args = []string{"push"}
			}
			_, stderr, err := h.box(tok, dir, append(args, c.push...)...)
			if err == nil {
				t.Fatalf("the push succeeded; stderr:\n%s", stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("git's stderr lacks %q:\n%s", w, stderr)
				}
			}
			if got := h.refs(testRepo); got != before {
				t.Errorf("upstream refs changed:\n%s\nwant\n%s", got, before)
			}
			if got := h.refs("owner/other"); got != otherBefore {
				t.Errorf("owner/other's refs changed")
			}
			if got := h.up.receivePacks(); got != posts {
				t.Errorf("%d pushes reached the upstream", got-posts)
			}
			if p := h.gotPushes(); len(p) != 0 {
				t.Errorf("OnPush called: %+v", p)
			}
			refused := h.gotRefusals()
			if c.kind == "" {
				if len(refused) != 0 {
					t.Errorf("OnRefuse called: %+v", refused)
				}
				return
			}
			if len(refused) != 1 || refused[0].Kind != c.kind || refused[0].Session != "sess-abc" || refused[0].Op != OpPush {
				t.Fatalf("OnRefuse: %+v, want one of kind %s", refused, c.kind)
			}
			if !strings.Contains(stderr, refused[0].Reason) {
				t.Errorf("the box was not told the refusal's reason %q", refused[0].Reason)
			}
			if c.kinds != nil {
				var got []RefusalKind
				for _, u := range refused[0].Refs {
					got = append(got, u.Refused)
				}
				if !slices.Equal(got, c.kinds) {
					t.Errorf("refused refs %v, want %v", got, c.kinds)
				}
			}
		})
	}
}
