package egress

// Env returns the environment that points a box's tools at the proxy:
// proxyURL is the URL they should use, with the session's token as its
// password, e.g. http://harvest:TOKEN@127.0.0.1:PORT (its in-box
// address). Set: HTTP_PROXY/HTTPS_PROXY and their lowercase forms (curl,
// wget, git, Go, pip, cargo, apt, Node's undici with
// NODE_USE_ENV_PROXY, Python's requests), npm's and yarn's own settings,
// pip's and cargo's, and NO_PROXY for the box's loopback, where the
// model proxy and other Harvest endpoints listen.
func Env(proxyURL string) []string {
	const noProxy = "127.0.0.1,localhost,::1"
	return []string{
		"HTTP_PROXY=" + proxyURL,
		"HTTPS_PROXY=" + proxyURL,
		"http_proxy=" + proxyURL,
		"https_proxy=" + proxyURL,
		"NO_PROXY=" + noProxy,
		"no_proxy=" + noProxy,
		"npm_config_proxy=" + proxyURL,
		"npm_config_https_proxy=" + proxyURL,
		"npm_config_noproxy=" + noProxy,
		"YARN_HTTP_PROXY=" + proxyURL,
		"YARN_HTTPS_PROXY=" + proxyURL,
		"PIP_PROXY=" + proxyURL,
		"CARGO_HTTP_PROXY=" + proxyURL,
		"NODE_USE_ENV_PROXY=1",
	}
}
