package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
)

// Paths inside a box.
const (
	boxAgentPath = "/.harvest/bin/harvest-agent"
	boxCgroupV1  = "/sys/fs/cgroup/memory"
	boxCgroupV2  = "/sys/fs/cgroup"
)

// systemDirs are top-level host directories shared read-only with boxes, as
// the symlinks they are on merged-/usr systems or as binds otherwise.
var systemDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcEntries are the host /etc entries a box gets, read-only. Everything else
// in /etc stays out: no users, no shadow, no gitconfig, no credentials of host
// services. passwd, group and hosts are generated per box user.
var etcEntries = []string{
	"alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf",
	"debian_version", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"locale.alias", "localtime", "magic", "magic.mime", "mime.types",
	"nsswitch.conf", "os-release", "profile", "profile.d", "protocols",
	"services", "ssl", "terminfo", "timezone", "vim", "xdg",
}

// bwrapLayout is what the provider prepared on the host for one box.
type bwrapLayout struct {
	spec       sandbox.Spec
	etcDir     string // generated passwd/group/hosts
	stageDir   string // per-box staging dir (mount points the shim fills)
	cgroupDir  string // the box's memory cgroup dir, shown read-only inside
	cgroupV2   bool
	listenFD   int
	infoFD     int
	deadline   int64
	agentStage string
}

// stagedWorkspace is where the shim mounts workspace name for bwrap to bind.
func stagedWorkspace(stage, name string) string { return filepath.Join(stage, "ws", name) }

// args returns bwrap's arguments. See the package doc for what each part is for.
func (l *bwrapLayout) args() []string {
	s := l.spec
	a := []string{
		"--unshare-all", "--unshare-user", "--disable-userns",
		"--die-with-parent", "--new-session", "--as-pid-1",
		"--cap-drop", "ALL",
		"--uid", strconv.Itoa(s.User.UID), "--gid", strconv.Itoa(s.User.GID),
		"--hostname", s.ID,
		"--clearenv",
	}
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a = append(a, "--setenv", k, s.Env[k])
	}

	a = append(a, "--ro-bind", "/usr", "/usr")
	for _, d := range systemDirs {
		host := "/" + d
		fi, err := os.Lstat(host)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(host); err == nil {
				a = append(a, "--symlink", target, host)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", host, host)
		}
	}

	a = append(a, "--dir", "/etc")
	for _, e := range etcEntries {
		host := "/etc/" + e
		fi, err := os.Lstat(host)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(host); err == nil {
				a = append(a, "--symlink", target, host)
			}
		default:
			a = append(a, "--ro-bind", host, host)
		}
	}
	for _, f := range []string{"passwd", "group", "hosts"} {
		a = append(a, "--ro-bind", filepath.Join(l.etcDir, f), "/etc/"+f)
	}

	a = append(a,
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/dev/shm",
		"--perms", "1777", "--tmpfs", "/tmp",
		"--dir", "/var", "--symlink", "../tmp", "/var/tmp",
		"--perms", "0700", "--tmpfs", homeOf(s),
		"--dir", sandbox.WorkspaceRoot,
	)
	for _, w := range s.Workspaces {
		a = append(a, "--bind", stagedWorkspace(l.stageDir, w.Name), w.Path())
	}
	a = append(a, "--ro-bind", l.agentStage, boxAgentPath)
	if l.cgroupDir != "" {
		dst := boxCgroupV1
		if l.cgroupV2 {
			dst = boxCgroupV2
		}
		a = append(a, "--dir", dst, "--ro-bind", l.cgroupDir, dst)
	}
	a = append(a,
		"--remount-ro", "/",
		"--chdir", "/",
		"--info-fd", strconv.Itoa(l.infoFD),
		boxAgentPath, "sandbox-agent",
		"--listen-fd", strconv.Itoa(l.listenFD),
		"--id", s.ID,
		"--workdir", s.Workdir,
		"--deadline-ms", strconv.FormatInt(l.deadline, 10),
	)
	return a
}

func homeOf(s sandbox.Spec) string {
	if h := s.Env["HOME"]; strings.HasPrefix(h, "/") && h != "/" {
		return h
	}
	return "/home/user"
}

// writeEtc generates passwd, group and hosts for a box user, once per user, in
// dir (world-readable: bwrap runs as the box user and binds them by path).
func writeEtc(dir string, s sandbox.Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	home := homeOf(s)
	files := map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nuser:x:%d:%d:Harvest box user:%s:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", s.User.UID, s.User.GID, home),
		"group":  fmt.Sprintf("root:x:0:\nuser:x:%d:\nnogroup:x:65534:\n", s.User.GID),
		"hosts":  "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	for name, content := range files {
		dst := filepath.Join(dir, name)
		if old, err := os.ReadFile(dst); err == nil && string(old) == content {
			continue
		}
		tmp, err := os.CreateTemp(dir, name+".tmp-*")
		if err != nil {
			return err
		}
		_, werr := tmp.WriteString(content)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), dst); err != nil {
			return err
		}
	}
	return nil
}
