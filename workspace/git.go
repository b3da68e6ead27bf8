package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Defaults of CloneOptions.
const (
	DefaultCloneTimeout = 10 * time.Minute
	DefaultCloneStall   = 30 * time.Second
)

// CloneOptions bound a clone of a URL source. A clone must always be
// stoppable: a server that accepts a connection and never answers, a
// transfer that trickles, a deleted session or a server shutdown all end it
// within a bound, with every process it started.
type CloneOptions struct {
	// Timeout bounds the whole clone (default DefaultCloneTimeout).
	Timeout time.Duration
	// Stall ends a clone that moves less than 1 KiB/s for this long,
	// connecting included (git's http.lowSpeedTime; ssh's ConnectTimeout)
	// (default DefaultCloneStall).
	Stall time.Duration
}

func (o CloneOptions) withDefaults() CloneOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultCloneTimeout
	}
	if o.Stall <= 0 {
		o.Stall = DefaultCloneStall
	}
	return o
}

// cloneWaitDelay is how long a killed clone's pipes may stay open (a child
// that escaped the process group) before Wait gives up on them.
const cloneWaitDelay = 2 * time.Second

// clone clones src.URL into dst with the host's git, isolated from the
// host's git setup: no system or global config (so no credential helpers,
// url rewrites or includes), no hooks, no templates, no prompts (a URL that
// needs credentials fails), only the protocols src allows, no redirects
// (the host was checked against Policy.GitHosts by name: a redirect
// would take the clone to a host nobody allowed, such as a metadata or
// private address). It runs in a
// process group of its own, killed whole when ctx ends, the timeout passes
// or git returns, so no helper (git-remote-https, ssh) outlives it.
func clone(ctx context.Context, src Source, dst string, opts CloneOptions) error {
	if _, err := exec.LookPath("git"); err != nil {
		return errors.New("cloning a URL needs git on the host: install it (apt-get install -y git)")
	}
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeoutCause(ctx, opts.Timeout, fmt.Errorf("the clone took longer than %s", opts.Timeout))
	defer cancel()
	stall := int(opts.Stall.Seconds())
	if stall < 1 {
		stall = 1
	}
	args := []string{
		"-c", "core.hooksPath=/dev/null",
		"-c", "core.fsmonitor=false",
		"-c", "credential.helper=",
		"-c", "http.lowSpeedLimit=1024",
		"-c", fmt.Sprintf("http.lowSpeedTime=%d", stall),
		"-c", "protocol.file.allow=user",
		"-c", "http.followRedirects=false",
		"clone", "--quiet", "--template=", "--no-recurse-submodules", "--", src.URL, dst,
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = cloneEnv(src.protocols(), stall)
	cmd.Dir = os.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = cloneWaitDelay
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
		// Whatever git left behind in its group goes with it.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		os.RemoveAll(dst)
		msg := strings.TrimSpace(out.String())
		if cause := context.Cause(ctx); cause != nil {
			return fmt.Errorf("git clone %s stopped: %w", src.URL, cause)
		}
		if strings.Contains(msg, "Operation too slow") || strings.Contains(msg, "timed out") {
			return fmt.Errorf("git clone %s: the server sent less than 1 KiB/s for %ds (a stalled or unreachable server): %s", src.URL, stall, msg)
		}
		if redirected.MatchString(msg) {
			return fmt.Errorf("git clone %s: the server answered with a redirect, which Harvest does not follow (it would lead the clone to a host nobody allowed): give the URL it redirects to: %s", src.URL, msg)
		}
		return fmt.Errorf("git clone %s: %v: %s", src.URL, err, msg)
	}
	return nil
}

// redirected matches git's message for an HTTP redirect it did not follow.
var redirected = regexp.MustCompile(`returned error: 30[1278]`)

// cloneEnv is the whole environment of a clone: nothing of the server's but
// PATH, HOME (ssh's known hosts and keys, for an admin's ssh URL) and proxy
// settings.
func cloneEnv(protocols []string, stall int) []string {
	env := []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_ALLOW_PROTOCOL=" + strings.Join(protocols, ":"),
		fmt.Sprintf("GIT_SSH_COMMAND=ssh -o BatchMode=yes -o ConnectTimeout=%d -o ServerAliveInterval=%d -o ServerAliveCountMax=1", stall, stall),
		"LC_ALL=C",
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env = append(env, "PATH="+path)
	if h := os.Getenv("HOME"); h != "" {
		env = append(env, "HOME="+h)
	}
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
