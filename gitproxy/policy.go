package gitproxy

import (
	"context"
	"fmt"
	"strings"
)

// check applies r's push policy to the commands of a push and returns
// every ref with why it is refused (Refused empty: allowed). A push is all
// or nothing: when any ref is refused, the others are marked
// RefusedWithOthers. See the package doc for the rules.
func check(ctx context.Context, r *repo, cmds []command) (refs []RefUpdate, refused bool) {
	for _, c := range cmds {
		u := RefUpdate{Ref: c.ref, Old: c.old, New: c.new}
		u.Refused, u.Reason = checkRef(ctx, r, c)
		refused = refused || u.Refused != ""
		refs = append(refs, u)
	}
	if !refused {
		return refs, false
	}
	for i := range refs {
		if refs[i].Refused == "" {
			refs[i].Refused = RefusedWithOthers
			refs[i].Reason = "harvest: not pushed because another ref of this push was refused; push this ref on its own"
		}
	}
	return refs, true
}

// checkRef returns why c may not be pushed to r, or "".
func checkRef(ctx context.Context, r *repo, c command) (RefusalKind, string) {
	instead := pushInstead(r)
	if r.ReadOnly {
		return RefusedReadOnly, fmt.Sprintf("harvest: %s is read-only for this session; it may fetch from it but not push", r.Path)
	}
	branch, isBranch := strings.CutPrefix(c.ref, "refs/heads/")
	switch {
	case strings.HasPrefix(c.ref, "refs/tags/"):
		return RefusedTag, "harvest: pushing tags is not allowed; " + instead
	case !isBranch || branch == "":
		return RefusedRef, fmt.Sprintf("harvest: only branches may be pushed, not %s; %s", c.ref, instead)
	case isZeroOID(c.new):
		return RefusedDelete, fmt.Sprintf("harvest: deleting branches is not allowed (%s); %s", branch, instead)
	case r.DefaultBranch != "" && branch == r.DefaultBranch:
		return RefusedDefaultBranch, fmt.Sprintf("harvest: pushing to the default branch %s is not allowed; %s", branch, instead)
	}
	allowed := false
	for _, b := range r.Branches {
		allowed = allowed || b == branch
	}
	if !allowed {
		return RefusedBranch, fmt.Sprintf("harvest: this session may not push to branch %s; %s", branch, instead)
	}
	if r.Protected != nil {
		prot, err := r.Protected(ctx, branch)
		switch {
		case err != nil:
			return RefusedProtected, fmt.Sprintf("harvest: could not check whether branch %s is protected, so it was not pushed; try again", branch)
		case prot:
			return RefusedProtected, fmt.Sprintf("harvest: branch %s is protected; %s", branch, instead)
		}
	}
	return "", ""
}

// pushInstead says where the session may push, for a refusal's reason.
func pushInstead(r *repo) string {
	var ok []string
	for _, b := range r.Branches {
		if b != r.DefaultBranch {
			ok = append(ok, b)
		}
	}
	switch {
	case r.ReadOnly || len(ok) == 0:
		return "this session may not push to " + r.Path
	case len(ok) == 1:
		return "push to " + ok[0]
	}
	return "push to one of " + strings.Join(ok, ", ")
}
