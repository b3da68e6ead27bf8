package gitproxy

import (
	"fmt"
	"net/url"
	"strings"
)

// DefaultWebBase is where the box's remotes point: GitHub.
const DefaultWebBase = "https://github.com/"

// BoxEnv returns the environment that sends the box's git to the proxy
// served on addr (the in-box listener's host:port) with the session's
// token, as git configuration in variables (GIT_CONFIG_COUNT,
// GIT_CONFIG_KEY_n, GIT_CONFIG_VALUE_n), so nothing is written into a
// .git/config the agent can edit, and the agent's remotes stay what they
// look like (origin https://github.com/owner/name.git).
//
// For each web base (default DefaultWebBase; a GitHub Enterprise server's
// https://ghe.example.com/), it sets
//
//	url.http://x-harvest:TOKEN@ADDR/.insteadOf = https://github.com/
//
// and the same for git@github.com: and ssh://git@github.com/, so
// https://github.com/owner/name(.git) and its SSH spellings resolve to
// http://…@ADDR/owner/name(.git); it sets http.http://ADDR/.proxy to ""
// so an HTTP(S)_PROXY in the box (the egress proxy) is not used for the
// loopback endpoint; and GIT_TERMINAL_PROMPT=0, so a refused credential
// fails rather than waits for a password.
//
// The token is visible in the box, in the environment and in git's
// configuration: that is the design, not a leak. It is good only against
// this proxy, only for the session's repositories and policy, only on the
// box's listener when the grant is bound to it (Grant.Listener), and only
// until revoked; the upstream credential never enters the box.
//
// The variables replace any GIT_CONFIG_COUNT set before them.
func BoxEnv(addr, token string, webBases ...string) []string {
	if len(webBases) == 0 {
		webBases = []string{DefaultWebBase}
	}
	endpoint := "http://" + url.UserPassword(TokenUser, token).String() + "@" + addr + "/"
	var kv [][2]string
	for _, base := range webBases {
		base = strings.TrimSuffix(base, "/") + "/"
		kv = append(kv, [2]string{"url." + endpoint + ".insteadOf", base})
		if u, err := url.Parse(base); err == nil && u.Host != "" && (u.Path == "" || u.Path == "/") {
			kv = append(kv,
				[2]string{"url." + endpoint + ".insteadOf", "git@" + u.Hostname() + ":"},
				[2]string{"url." + endpoint + ".insteadOf", "ssh://git@" + u.Hostname() + "/"})
		}
	}
	kv = append(kv, [2]string{"http.http://" + addr + "/.proxy", ""})
	env := []string{fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(kv))}
	for i, p := range kv {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, p[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, p[1]))
	}
	return append(env, "GIT_TERMINAL_PROMPT=0")
}
