package agents

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
)

// DefaultCLIPrefix is where scripts/setup installs the pinned CLIs (npm
// install --prefix).
const DefaultCLIPrefix = "/opt/harvest/npm"

// CLIPath is the path of the npm binary cli under prefix, on the host and,
// as Mounts shows prefix at the same path, in the box.
func CLIPath(prefix, cli string) string {
	return filepath.Join(prefix, "node_modules", ".bin", cli)
}

// CheckCLI reports, on the host, whether kind's CLI is installed under
// prefix, saying how to install it when it is not (nil for a kind that
// runs none).
func CheckCLI(prefix string, k agent.Kind) error {
	if k.Caps.CLI == "" {
		return nil
	}
	p := CLIPath(prefix, k.Caps.CLI)
	fi, err := os.Stat(p)
	if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return nil
	}
	if err == nil {
		err = errors.New("not an executable file")
	}
	return fmt.Errorf("the %s agent needs its CLI at %s (%v): run scripts/setup, or point Harvest at another npm prefix", k.Name, p, err)
}

// CheckBackend says whether kind runs on backend. An agent that runs a CLI
// in the box runs on the isolating backends only: on the host backend the
// CLI would see this machine's own files, its config and credentials
// among them. (The CLIs npm installs are native executables linked against
// glibc, mounted read-only from the host: they run in a local box, with
// the host's own /usr, and in the docker backend's Debian base image.)
func CheckBackend(k agent.Kind, backend string) error {
	if k.Caps.Backends == nil || slices.Contains(k.Caps.Backends, backend) {
		return nil
	}
	return fmt.Errorf("the %s agent runs in an isolated box, on the %s backend; not on %q", k.Name, describeBackends(k.Caps.Backends), backend)
}

// CheckModel reports whether kind can use a model of an endpoint speaking
// api ("" when unknown: nothing to check).
func CheckModel(k agent.Kind, api string) error {
	if api == "" || k.Caps.APIs == nil || slices.Contains(k.Caps.APIs, api) {
		return nil
	}
	return fmt.Errorf("the %s agent speaks the %s API: give a model of an endpoint that does (%s/...)", k.Name, apiTitle(k.Caps.APIs[0]), k.Caps.APIs[0])
}

func apiTitle(api string) string {
	switch api {
	case "anthropic":
		return "Anthropic"
	case "openai":
		return "OpenAI"
	}
	return api
}

// Check validates, before anything is stored or started, that kind name
// can run: on backend, with model, of an endpoint speaking api ("" when
// unknown), its CLI installed under cliPrefix — unless command (a terminal
// CLI of the caller's own) replaces it. It returns the kind and every
// problem, each saying what to change.
func Check(name, model, api, backend, cliPrefix string, command bool) (agent.Kind, []string) {
	k, err := Lookup(name)
	if err != nil {
		return k, []string{err.Error()}
	}
	var problems []string
	own := command && k.Caps.TakesCommand
	if !own {
		if err := CheckCLI(cliPrefix, k); err != nil {
			problems = append(problems, "agent: "+err.Error())
		}
	}
	if err := CheckBackend(k, backend); err != nil {
		problems = append(problems, fmt.Sprintf("agent %q: %v; leave backend empty or use one of those", k.Name, err))
	}
	if !own {
		if err := CheckModel(k, api); err != nil {
			problems = append(problems, fmt.Sprintf("model %q: %v", model, err))
		}
	}
	return k, problems
}

// Mounts is what a box for kind needs besides its workspaces: the CLIs'
// npm prefix, read-only at the same path, for a kind that runs one.
func Mounts(k agent.Kind, prefix string) []sandbox.Mount {
	if k.Caps.CLI == "" && !k.Caps.TakesCommand {
		return nil
	}
	return []sandbox.Mount{{HostPath: prefix, BoxPath: prefix}}
}

// APIOf is the wire API of model's endpoint in models ("" when none is
// configured).
func APIOf(models providers.Config, model string) string {
	name, _, err := llm.ParseModel(model)
	if err != nil {
		return ""
	}
	e, ok := models.Endpoints[name]
	if !ok {
		return ""
	}
	if e.API != "" {
		return e.API
	}
	return name
}

// NewProxy returns a model proxy for the endpoint of model (a Harvest model
// name, "endpoint/model") as models configures it: its real key is what
// the proxy adds; obs, if not nil, hears of its requests.
func NewProxy(models providers.Config, model string, log *slog.Logger, obs modelproxy.Observer) (*modelproxy.Proxy, error) {
	name, _, err := llm.ParseModel(model)
	if err != nil {
		return nil, err
	}
	e, ok := models.Endpoints[name]
	if !ok {
		return nil, fmt.Errorf("model %q: no endpoint %q is configured", model, name)
	}
	up := &modelproxy.Upstream{BaseURL: e.BaseURL, APIKey: e.APIKey}
	cfg := modelproxy.Config{Prices: models.Prices, Logger: log, Observer: obs}
	switch api := APIOf(models, model); api {
	case "anthropic":
		cfg.Anthropic = up
	case "openai":
		cfg.OpenAI = up
	default:
		return nil, fmt.Errorf("model %q: endpoint %q speaks %q, which the model proxy does not", model, name, api)
	}
	return modelproxy.New(cfg)
}

// checkLoader says, before anything starts, when the box cannot run the
// CLI at all: a dynamically linked executable whose program interpreter
// (read from its ELF header on the host, where the same file is) is missing
// in the box's image — an Alpine image for the glibc builds npm installs —
// would otherwise fail to start with a bare "no such file or directory".
func checkLoader(ctx context.Context, box *sandbox.Sandbox, cli, kind string) error {
	interp, err := elfInterpreter(cli)
	if err != nil || interp == "" {
		return nil // not ELF, or static: nothing to check here
	}
	if _, err := box.Stat(ctx, interp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the %s agent cannot run in this box: its CLI %s needs the program interpreter %s, which the box's image does not have (npm installs glibc builds: use a glibc image such as the Debian one scripts/setup builds, or the local backend)", kind, cli, interp)
		}
		return fmt.Errorf("the %s agent: checking the box for %s: %w", kind, interp, err)
	}
	return nil
}

// elfInterpreter is the PT_INTERP of the ELF file at path ("" for a static
// executable).
func elfInterpreter(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return "", err
		}
		return string(trimNUL(b)), nil
	}
	return "", nil
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
