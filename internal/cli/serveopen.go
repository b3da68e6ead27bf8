package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/harvest-dev/harvest/internal/demo"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// What harvest serve opens at start: its sandbox backends, its models and
// its store.

// providerSet opens each sandbox backend once, for the Manager, and closes
// them all at the end.
type providerSet struct {
	opts   backends.Options
	stderr io.Writer
	// observe, when set, hears of every box operation (the metrics).
	observe sandbox.Observer

	mu    sync.Mutex
	open_ map[string]sandbox.Provider
}

func (p *providerSet) open(name string) (sandbox.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr, ok := p.open_[name]; ok {
		return pr, nil
	}
	pr, err := backends.Open(name, p.opts)
	if err != nil {
		return nil, err
	}
	pr = sandbox.Observe(pr, p.observe)
	if name == "host" {
		fmt.Fprintln(p.stderr, "harvest:", unsafeWarning)
	}
	if p.open_ == nil {
		p.open_ = map[string]sandbox.Provider{}
	}
	p.open_[name] = pr
	return pr, nil
}

// list returns the backends opened so far.
func (p *providerSet) list() []sandbox.Provider {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]sandbox.Provider, 0, len(p.open_))
	for _, pr := range p.open_ {
		out = append(out, pr)
	}
	return out
}

func (p *providerSet) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.open_ {
		if c, ok := pr.(interface{ Close() error }); ok {
			c.Close()
		}
	}
	p.open_ = nil
}

// serverModels is where the server's sessions get their models.
type serverModels struct {
	cfg   providers.Config
	model string
	stop  func()
}

// serveModels picks the models as harvest run does: --sim-script, else
// --model / $HARVEST_MODEL / the keys in the environment, else the demo.
func serveModels(f serveFlags, stderr io.Writer) (*serverModels, error) {
	cfg := providers.FromEnv()
	model := f.model
	if model == "" {
		model = strings.TrimSpace(os.Getenv("HARVEST_MODEL"))
	}
	if f.simScript != "" {
		s, err := sim.LoadScript(f.simScript)
		if err != nil {
			return nil, fmt.Errorf("--sim-script: %w", err)
		}
		fmt.Fprintf(stderr, "harvest: every model is served by harvest sim with the script %s: the answers are scripted\n", f.simScript)
		return simModels(cfg, s, model)
	}
	if model == "" {
		switch {
		case cfg.Endpoints["anthropic"].APIKey != "":
			model = "anthropic/claude-sonnet-4-5"
		case cfg.Endpoints["openai"].APIKey != "":
			model = "openai/gpt-4.1"
		default:
			s, err := demo.Script()
			if err != nil {
				return nil, err
			}
			fmt.Fprintln(stderr, "harvest: no model key is configured (ANTHROPIC_API_KEY or OPENAI_API_KEY), so sessions run on harvest sim's bundled DEMO script, which only knows how to fix examples/calc")
			return simModels(cfg, s, demo.Model)
		}
	}
	if _, err := providers.Open(cfg, model); err != nil {
		return nil, fmt.Errorf("model %s: %w", model, err)
	}
	return &serverModels{cfg: cfg, model: model, stop: func() {}}, nil
}

// simModels serves script on loopback for the whole server.
func simModels(cfg providers.Config, s *sim.Script, model string) (*serverModels, error) {
	cfg, model, stop, err := serveSim(cfg, s, model)
	if err != nil {
		return nil, err
	}
	return &serverModels{cfg: cfg, model: model, stop: stop}, nil
}

// openStore opens the SQLite store at path.
func openStore(path string) (store.Store, error) {
	st, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	return st, nil
}
