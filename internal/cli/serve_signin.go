package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
)

// signInFlags are harvest serve's settings for signing in with GitHub or
// an OIDC provider (server.SignIn). Client secrets come from a file
// (mode 0600) or the environment, never the command line.
type signInFlags struct {
	githubClientID, githubSecretFile string

	oidc                                 server.OIDCSignIn
	oidcSecretFile, oidcRole             string
	oidcScopes, oidcDomains              []string
	oidcAdmins, oidcMembers, oidcViewers []string
}

const (
	githubClientSecretEnv = "HARVEST_GITHUB_CLIENT_SECRET"
	oidcClientSecretEnv   = "HARVEST_OIDC_CLIENT_SECRET"
)

func (s *signInFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&s.githubClientID, "github-client-id", "", `the GitHub App's client id: enables "Sign in with GitHub" (the App's callback URL: PUBLIC-URL/v1/auth/github/callback)`)
	fl.StringVar(&s.githubSecretFile, "github-client-secret-file", "", "a file holding the GitHub App's client secret (mode 0600; or $"+githubClientSecretEnv+")")
	fl.StringVar(&s.oidc.Issuer, "oidc-issuer", "", `an OpenID Connect provider's issuer URL: enables "Sign in with --oidc-name" (the client's redirect URI: PUBLIC-URL/v1/auth/oidc/callback)`)
	fl.StringVar(&s.oidc.ClientID, "oidc-client-id", "", "Harvest's client id at the OIDC provider")
	fl.StringVar(&s.oidcSecretFile, "oidc-client-secret-file", "", "a file holding Harvest's client secret at the OIDC provider (mode 0600; or $"+oidcClientSecretEnv+")")
	fl.StringVar(&s.oidc.Name, "oidc-name", "", `the OIDC provider's name on the sign-in button ("Sign in with NAME"; default OIDC)`)
	fl.StringSliceVar(&s.oidcScopes, "oidc-scopes", nil, "scopes asked for besides openid (default email,profile; add groups when the provider needs it for --oidc-role-claim)")
	fl.StringSliceVar(&s.oidcDomains, "oidc-allowed-domains", nil, "email domains that may sign in with OIDC (comma-separated; the provider must have verified the address); default any")
	fl.StringVar(&s.oidc.RoleClaim, "oidc-role-claim", "", "a claim listing a person's groups (like groups): with --oidc-admin-groups, --oidc-member-groups, --oidc-viewer-groups, the role follows the provider at every sign-in")
	fl.StringSliceVar(&s.oidcAdmins, "oidc-admin-groups", nil, "groups whose people are admins (comma-separated)")
	fl.StringSliceVar(&s.oidcMembers, "oidc-member-groups", nil, "groups whose people are members (comma-separated)")
	fl.StringSliceVar(&s.oidcViewers, "oidc-viewer-groups", nil, "groups whose people are viewers (comma-separated)")
	fl.BoolVar(&s.oidc.RequireGroup, "oidc-require-group", false, "refuse a person in none of the groups of --oidc-*-groups (default: they get --oidc-user-role)")
	fl.StringVar(&s.oidcRole, "oidc-user-role", "member", "the role of a person who first signs in with OIDC when no group decides it: member or viewer")
}

// secretFromFileOrEnv reads a client secret: the file (owner-only), or
// the environment variable.
func secretFromFileOrEnv(file, flag, env string) (string, error) {
	if file != "" {
		fi, err := os.Stat(file)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flag, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("--%s %s is readable by others (mode %04o): chmod 600 %s", flag, file, fi.Mode().Perm(), file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flag, err)
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("--%s %s is empty: put the client secret in it", flag, file)
	}
	return strings.TrimSpace(os.Getenv(env)), nil
}

// config builds server.SignIn; github names the GitHub side's URLs and
// role flags (--github-url, --github-api-url, --github-user-role).
func (s *signInFlags) config(g *githubFlags) (server.SignIn, error) {
	out := server.SignIn{PublicURL: g.publicURL}
	var problems []string
	if s.githubClientID != "" || s.githubSecretFile != "" {
		secret, err := secretFromFileOrEnv(s.githubSecretFile, "github-client-secret-file", githubClientSecretEnv)
		switch {
		case err != nil:
			problems = append(problems, err.Error())
		case s.githubClientID == "":
			problems = append(problems, "--github-client-secret-file needs --github-client-id: the App's client id (its settings page shows both)")
		case secret == "":
			problems = append(problems, "--github-client-id needs the App's client secret: --github-client-secret-file or $"+githubClientSecretEnv)
		}
		role := store.Role(g.userRole)
		if role != store.RoleMember && role != store.RoleViewer {
			problems = append(problems, fmt.Sprintf("--github-user-role %q: give member or viewer", g.userRole))
		}
		web, api := g.files.WebURL, g.files.APIURL
		if web == "" {
			web = gh.DefaultWebURL
		}
		if api == "" {
			api = gh.DefaultAPIURL
		}
		out.GitHub = &server.GitHubSignIn{WebURL: web, APIURL: api, ClientID: s.githubClientID, ClientSecret: secret, Role: role}
	}
	oidcSet := s.oidc.Issuer != "" || s.oidc.ClientID != "" || s.oidcSecretFile != "" || s.oidc.RoleClaim != "" ||
		len(s.oidcDomains)+len(s.oidcAdmins)+len(s.oidcMembers)+len(s.oidcViewers) > 0
	if oidcSet {
		secret, err := secretFromFileOrEnv(s.oidcSecretFile, "oidc-client-secret-file", oidcClientSecretEnv)
		if err != nil {
			problems = append(problems, err.Error())
		}
		o := &server.OIDCSignIn{Issuer: s.oidc.Issuer, ClientID: s.oidc.ClientID, ClientSecret: secret, Name: s.oidc.Name,
			Scopes: s.oidcScopes, AllowedDomains: lower(s.oidcDomains), RoleClaim: s.oidc.RoleClaim,
			AdminGroups: s.oidcAdmins, MemberGroups: s.oidcMembers, ViewerGroups: s.oidcViewers, RequireGroup: s.oidc.RequireGroup,
			Role: store.Role(s.oidcRole)}
		if o.Role == store.RoleAdmin {
			problems = append(problems, "--oidc-user-role admin: give member or viewer (admins come from --oidc-admin-groups or harvest user set-role)")
		}
		if err := o.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
		out.OIDC = o
	}
	if len(problems) > 0 {
		return server.SignIn{}, errors.New(strings.Join(problems, "; "))
	}
	return out, nil
}

func lower(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, strings.ToLower(strings.TrimSpace(s)))
	}
	return out
}
