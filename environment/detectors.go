package environment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// What Detect recognises, when a repository has no .harvest/setup.sh of
// its own. One detector per ecosystem, in the order their scripts run;
// each chooses at most one step, so a repository gets one JavaScript
// installer and one Python virtualenv however many of their files it
// has:
//
//	Go          go.work  > go.mod
//	JavaScript  the lockfile package.json's packageManager names (npm, pnpm, yarn)
//	            > package-lock.json or npm-shrinkwrap.json > pnpm-lock.yaml > yarn.lock
//	            > package.json alone (npm install, writing no lockfile)
//	Python      uv.lock > poetry.lock > requirements.txt > pyproject.toml
//	Rust        Cargo.lock
//	Ruby        Gemfile.lock
//
// Each script runs from the repository's root with `set -e`, in the
// setup's box. The tools it needs (go, npm, corepack, python3, uv,
// poetry, cargo, bundle) must be there: the docker image carries go,
// node 18 with npm and python3 (no corepack, uv, poetry, cargo or Ruby);
// the local backend sees the host's. A
// script whose tool is optional (uv, poetry) says in the build log what
// it used; one whose tool is required and missing (corepack, bundle)
// says so and fails. A detector reads only top-level regular files
// (symlinks are ignored, never followed) and only what decides the step
// (package.json's packageManager, yarn.lock's format).

// DetectedFiles are the files a setup is detected from, for people.
var DetectedFiles = []string{"go.work", "go.mod", "package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "yarn.lock",
	"package.json", "uv.lock", "poetry.lock", "requirements.txt", "pyproject.toml", "Cargo.lock", "Gemfile.lock"}

// step is what one detector found: Detected's line and its script.
type step struct{ detected, script string }

var detectors = []func(checkout) (step, bool){detectGo, detectJS, detectPython, detectRust, detectRuby}

// checkout is a repository's directory, as detectors read it.
type checkout string

// has says whether the checkout has name as a regular file (not a
// symlink: a lockfile that points elsewhere is not the repository's).
func (c checkout) has(name string) bool {
	fi, err := os.Lstat(filepath.Join(string(c), name))
	return err == nil && fi.Mode().IsRegular()
}

// head reads up to n bytes of the regular file name, never through a
// symlink; nil when there is no such file.
func (c checkout) head(name string, n int64) []byte {
	f, err := os.OpenFile(filepath.Join(string(c), name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil
	}
	return b
}

func detectGo(c checkout) (step, bool) {
	switch {
	case c.has("go.work"):
		// `go mod download` in a workspace fetches every module's
		// requirements; ./... from the root would match only a module
		// there, so each module's test binaries are built from its own
		// directory (go finds the go.work above it).
		return step{"go.work: go mod download and a build of the test binaries of every module of the workspace",
			"go mod download\n" +
				"harvest_mods=$(go list -m -f '{{.Dir}}')\n" +
				"printf '%s\\n' \"$harvest_mods\" | while IFS= read -r harvest_mod; do (cd \"$harvest_mod\" && go test -count=1 -run '^$' ./... >/dev/null); done\n"}, true
	case c.has("go.mod"):
		return step{"go.mod: go mod download and a build of the test binaries",
			"go mod download\ngo test -count=1 -run '^$' ./... >/dev/null\n"}, true
	}
	return step{}, false
}

// corepackEnv keeps corepack from asking before it downloads a package
// manager (nobody answers in a setup) and from writing a packageManager
// field into the repository's package.json.
const corepackEnv = "export COREPACK_ENABLE_DOWNLOAD_PROMPT=0 COREPACK_ENABLE_AUTO_PIN=0\n"

// needCorepack fails a setup, saying why, when the box has no corepack.
func needCorepack(lockfile, tool string) string {
	return fmt.Sprintf(`if ! command -v corepack >/dev/null 2>&1; then
  echo "harvest: %s needs %s, which Harvest runs through corepack, and this box has no corepack (Node.js 16.9 to 24 ship it; Debian's nodejs package, which the docker image has, does not). Use a box image whose node has corepack, or give the repository a setup of its own (.harvest/setup.sh, or the server's --repo-config) that installs %s, e.g. npm install -g --prefix ~/.local %s" >&2
  exit 1
fi
`, lockfile, tool, tool, tool)
}

func detectJS(c checkout) (step, bool) {
	pm := c.packageManager()
	npmLock := ""
	for _, f := range []string{"package-lock.json", "npm-shrinkwrap.json"} {
		if c.has(f) {
			npmLock = f
			break
		}
	}
	pnpm, yarn := c.has("pnpm-lock.yaml"), c.has("yarn.lock")
	tool := ""
	switch {
	case pm.name == "npm" && npmLock != "", pm.name == "pnpm" && pnpm, pm.name == "yarn" && yarn:
		tool = pm.name
	case npmLock != "":
		tool = "npm"
	case pnpm:
		tool = "pnpm"
	case yarn:
		tool = "yarn"
	}
	pinned := "" // "(pnpm 9.1.0, package.json's packageManager)"
	if tool != "" && tool == pm.name && pm.version != "" {
		pinned = fmt.Sprintf(" (%s %s, package.json's packageManager)", pm.name, pm.version)
	}
	switch tool {
	case "npm":
		return step{npmLock + ": npm ci, devDependencies included" + pinned,
			"npm ci --include=dev --no-audit --no-fund\n"}, true
	case "pnpm":
		return step{"pnpm-lock.yaml: corepack pnpm install --frozen-lockfile" + pinned,
			needCorepack("pnpm-lock.yaml", "pnpm") + corepackEnv + "corepack pnpm install --frozen-lockfile\n"}, true
	case "yarn":
		// Yarn 1 and Yarn 2+ ("Berry") take different flags for "install
		// exactly the lockfile": the version packageManager pins decides,
		// else the lockfile's format (Berry's has a __metadata entry).
		berry := bytes.Contains(c.head("yarn.lock", 4<<10), []byte("\n__metadata:"))
		why := " (yarn 1: a v1 lockfile)"
		if berry {
			why = " (yarn 2 or later: a Berry lockfile)"
		}
		if pinned != "" {
			berry, why = !strings.HasPrefix(pm.version, "1."), pinned
		}
		flags := "--frozen-lockfile --non-interactive"
		if berry {
			flags = "--immutable"
		}
		return step{"yarn.lock: corepack yarn install " + flags + why,
			needCorepack("yarn.lock", "yarn") + corepackEnv + "corepack yarn install " + flags + "\n"}, true
	}
	if c.has("package.json") {
		// No lockfile, as many libraries publish: npm resolves the ranges
		// in package.json and installs them, the devDependencies too (the
		// tests need them), leaving no package-lock.json in the checkout
		// (a session's `git status` stays the repository's).
		return step{"package.json (no lockfile): npm install, devDependencies included, writing no package-lock.json",
			"npm install --no-package-lock --include=dev --no-audit --no-fund\n"}, true
	}
	return step{}, false
}

// packageManager is package.json's "packageManager": "NAME@VERSION[+HASH]".
type packageManager struct{ name, version string }

// maxPackageJSON bounds the package.json Detect reads.
const maxPackageJSON = 1 << 20

var pmVersion = regexp.MustCompile(`^[0-9][0-9A-Za-z.-]{0,40}$`)

// packageManager is what package.json's packageManager field names, when
// it is one Harvest knows (npm, pnpm, yarn) with a plain version; zero
// otherwise (no package.json, too big, not JSON, another tool).
func (c checkout) packageManager() packageManager {
	b := c.head("package.json", maxPackageJSON+1)
	if b == nil || len(b) > maxPackageJSON {
		return packageManager{}
	}
	var pj struct {
		PackageManager string `json:"packageManager"`
	}
	if json.Unmarshal(b, &pj) != nil {
		return packageManager{}
	}
	name, version, _ := strings.Cut(pj.PackageManager, "@")
	version, _, _ = strings.Cut(version, "+") // the hash corepack checks
	switch name {
	case "npm", "pnpm", "yarn":
	default:
		return packageManager{}
	}
	if !pmVersion.MatchString(version) {
		version = ""
	}
	return packageManager{name, version}
}

// pipFallback is the virtualenv a Python lockfile's tool makes, made
// with pip when the box lacks the tool.
func pipFallback(lockfile, tool string) string {
	return fmt.Sprintf(`  echo "harvest: %s: this box has no %s: a virtualenv in .venv with the project installed by pip instead (%s's pinned versions and development dependencies do not apply)"
  python3 -m venv .venv
  .venv/bin/pip install --disable-pip-version-check .
`, lockfile, tool, lockfile)
}

func detectPython(c checkout) (step, bool) {
	switch {
	case c.has("uv.lock"):
		return step{"uv.lock: uv sync --frozen into .venv when the box has uv, else a virtualenv in .venv with the project installed by pip",
			"if command -v uv >/dev/null 2>&1; then\n" +
				"  echo \"harvest: uv.lock: uv sync --frozen (into .venv)\"\n" +
				"  UV_LINK_MODE=copy uv sync --frozen\n" +
				"else\n" + pipFallback("uv.lock", "uv") + "fi\n"}, true
	case c.has("poetry.lock"):
		return step{"poetry.lock: poetry install into .venv when the box has poetry, else a virtualenv in .venv with the project installed by pip",
			"if command -v poetry >/dev/null 2>&1; then\n" +
				"  echo \"harvest: poetry.lock: poetry install (into .venv)\"\n" +
				"  POETRY_VIRTUALENVS_IN_PROJECT=true poetry install --no-interaction\n" +
				"else\n" + pipFallback("poetry.lock", "poetry") + "fi\n"}, true
	case c.has("requirements.txt"):
		return step{"requirements.txt: a virtualenv in .venv with requirements.txt installed",
			"python3 -m venv .venv\n.venv/bin/pip install --disable-pip-version-check -r requirements.txt\n"}, true
	case c.has("pyproject.toml"):
		return step{"pyproject.toml: a virtualenv in .venv with the package installed",
			"[ -d .venv ] || python3 -m venv .venv\n.venv/bin/pip install --disable-pip-version-check .\n"}, true
	}
	return step{}, false
}

func detectRust(c checkout) (step, bool) {
	if c.has("Cargo.lock") {
		return step{"Cargo.lock: cargo fetch", "cargo fetch\n"}, true
	}
	return step{}, false
}

func detectRuby(c checkout) (step, bool) {
	if !c.has("Gemfile.lock") {
		return step{}, false
	}
	// The gems go into the checkout (vendor/bundle), which the
	// checkout's own .bundle/config names: a session's bundler finds
	// them there, with nothing in HOME to set.
	return step{"Gemfile.lock: bundle install into vendor/bundle (a local bundle config in the checkout says so)",
		`if ! command -v bundle >/dev/null 2>&1; then
  echo "harvest: Gemfile.lock needs Ruby's bundler, and this box has no bundle command (the docker image has no Ruby). Use a box image with Ruby and bundler, or give the repository a setup of its own (.harvest/setup.sh, or the server's --repo-config)" >&2
  exit 1
fi
bundle config set --local path vendor/bundle
bundle install
`}, true
}
