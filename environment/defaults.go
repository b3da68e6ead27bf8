package environment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Defaults are the server's setup and start scripts per repository (harvest
// serve --repo-config), for repositories that have none of their own: a
// repository's .harvest/setup.sh or start.sh wins over the server's.
type Defaults struct {
	Repos map[string]RepoDefaults `yaml:"repositories"`
}

// RepoDefaults are one repository's server-side scripts.
type RepoDefaults struct {
	Setup string `yaml:"setup"`
	Start string `yaml:"start"`
	// Env is given to the setup, whichever it is (the repository's own,
	// detected, or Setup): settings like PIP_INDEX_URL for a private
	// index. Not for credentials: those are setup secrets.
	Env map[string]string `yaml:"env"`
}

var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are names Harvest sets for a setup itself.
func reservedEnv(k string) bool {
	switch strings.ToUpper(k) {
	case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "HOME", "PATH", "USER":
		return true
	}
	return strings.HasPrefix(strings.ToUpper(k), "HARVEST_")
}

var defaultsKeyPattern = regexp.MustCompile(`^(github:[A-Za-z0-9-]+/[A-Za-z0-9._-]+|/.+|https?://.+)$`)

// LoadDefaults reads a --repo-config file:
//
//	repositories:
//	  github:acme/api:          # GitHub's owner/name, a directory on the server, or a git URL
//	    setup: |                # run when its environment is built (HARVEST_BOOT_MODE=setup)
//	      make deps
//	    start: make services &  # run at every box start of its sessions (HARVEST_BOOT_MODE=start)
//	    env:                    # given to its setup (settings, not credentials: those are setup secrets)
//	      PIP_INDEX_URL: http://pypi.internal:3141/simple
//
// Unknown fields, bad keys and empty entries are errors that say where.
func LoadDefaults(path string) (*Defaults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var d Defaults
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var errs []error
	keys := make([]string, 0, len(d.Repos))
	for k := range d.Repos {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	norm := map[string]RepoDefaults{}
	for _, k := range keys {
		v := d.Repos[k]
		switch {
		case !defaultsKeyPattern.MatchString(k):
			errs = append(errs, fmt.Errorf("%s: repositories.%s: name a repository as github:owner/name, an absolute directory or an http(s) git URL", path, k))
		case strings.TrimSpace(v.Setup) == "" && strings.TrimSpace(v.Start) == "" && len(v.Env) == 0:
			errs = append(errs, fmt.Errorf("%s: repositories.%s: give setup, start, env or some of them", path, k))
		case len(v.Setup) > maxScript || len(v.Start) > maxScript:
			errs = append(errs, fmt.Errorf("%s: repositories.%s: a script is larger than %d KiB", path, k, maxScript>>10))
		}
		for name := range v.Env {
			switch {
			case !envNamePattern.MatchString(name):
				errs = append(errs, fmt.Errorf("%s: repositories.%s.env: %q is not an environment variable name (letters, digits and _, not starting with a digit)", path, k, name))
			case reservedEnv(name):
				errs = append(errs, fmt.Errorf("%s: repositories.%s.env: %s is set by Harvest itself; choose another name", path, k, name))
			}
		}
		if strings.HasPrefix(k, "github:") {
			k = strings.ToLower(k)
		}
		norm[k] = v
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d.Repos = norm
	return &d, nil
}

// For returns repo's server-side scripts (repo as Environment.Repo names
// it); zero when it has none. A nil Defaults has none.
func (d *Defaults) For(repo string) RepoDefaults {
	if d == nil {
		return RepoDefaults{}
	}
	if strings.HasPrefix(repo, "github:") {
		repo = strings.ToLower(repo)
	}
	return d.Repos[repo]
}

// apply fills a plan's missing scripts from the server's.
func (rd RepoDefaults) apply(p Plan) Plan {
	if rd.Setup != "" && !contains(p.Detected, SetupScript) {
		p.Setup, p.Detected = rd.Setup, []string{"the server's setup for this repository (--repo-config)"}
	}
	if rd.Start != "" && p.Start == "" {
		p.Start = rd.Start
	}
	p.Env = nil
	for k, v := range rd.Env {
		p.Env = append(p.Env, k+"="+v)
	}
	sort.Strings(p.Env)
	return p
}
