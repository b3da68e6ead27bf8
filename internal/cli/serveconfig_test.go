package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// These run harvest serve's command in this process with --print-config
// (which starts nothing), or with values refused before anything starts.

// harvestIn runs the harvest command line in this process.
func harvestIn(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "harvest.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// settable lists serve's flags a config file sets: all but notSettings.
func settable(fl *pflag.FlagSet) []*pflag.Flag {
	var out []*pflag.Flag
	fl.VisitAll(func(f *pflag.Flag) {
		if !notSettings[f.Name] {
			out = append(out, f)
		}
	})
	return out
}

// sample is a YAML value for flag f other than its default where the
// test knows its type, and what the flag then holds (its String, or its
// list); else the default itself, which the flag must take all the same.
func sample(f *pflag.Flag) (text string, want any) {
	switch {
	case isList(f) && annotation(f, configAnnotation) == configKeyValue:
		return "{one: 10.0.0.1:1, two: 10.0.0.2:2}", []string{"one=10.0.0.1:1", "two=10.0.0.2:2"}
	case isList(f):
		return "[first-" + f.Name + ", second-" + f.Name + "]", []string{"first-" + f.Name, "second-" + f.Name}
	}
	switch f.Value.Type() {
	case "bool":
		if f.DefValue == "true" {
			return "false", "false"
		}
		return "true", "true"
	case "int", "int64", "int32", "uint", "uint64":
		if f.DefValue == "7" {
			return "8", "8"
		}
		return "7", "7"
	case "duration":
		return "7m13s", "7m13s"
	case "float64":
		return "1.5", "1.5"
	case "string":
		return "value-of-" + f.Name, "value-of-" + f.Name
	}
	return fmt.Sprintf("%q", f.DefValue), f.DefValue
}

func flagValue(f *pflag.Flag) any {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.GetSlice()
	}
	return f.Value.String()
}

// TestServeConfigEveryFlag: every flag of harvest serve (all of them,
// enumerated: a flag added tomorrow included) is set by a config file
// key of its name; --print-config prints every one; and what it prints,
// fed back, gives the same settings.
func TestServeConfigEveryFlag(t *testing.T) {
	cmd := newServeCmd()
	fl := cmd.Flags()
	var file strings.Builder
	want := map[string]any{}
	for _, f := range settable(fl) {
		text, w := sample(f)
		fmt.Fprintf(&file, "%s: %s\n", f.Name, text)
		want[f.Name] = w
	}
	if len(want) < 40 {
		t.Fatalf("only %d settable flags: is this serve's flag set?", len(want))
	}
	path := writeConfig(t, file.String())
	if err := fl.Parse(nil); err != nil {
		t.Fatal(err)
	}
	c, err := loadServeConfig(fl, path)
	if err != nil {
		t.Fatalf("loading a file that sets every flag: %v\n%s", err, file.String())
	}
	for _, f := range settable(fl) {
		if got := flagValue(f); fmt.Sprint(got) != fmt.Sprint(want[f.Name]) {
			t.Errorf("--%s from the file: %v, want %v", f.Name, got, want[f.Name])
		}
		if c.lines[f.Name] == 0 {
			t.Errorf("--%s: the file's line is not recorded", f.Name)
		}
	}

	// Printed, and fed back: the same settings.
	var out bytes.Buffer
	if err := printServeConfig(&out, fl, c); err != nil {
		t.Fatal(err)
	}
	printed := out.String()
	for _, f := range settable(fl) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(f.Name) + `:`).MatchString(printed) {
			t.Errorf("--print-config lacks %s", f.Name)
		}
	}
	again := newServeCmd().Flags()
	if err := again.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := loadServeConfig(again, writeConfig(t, printed)); err != nil {
		t.Fatalf("the printed configuration, fed back: %v\n%s", err, printed)
	}
	for _, f := range settable(fl) {
		if a, b := fmt.Sprint(flagValue(f)), fmt.Sprint(flagValue(again.Lookup(f.Name))); a != b {
			t.Errorf("--%s: %s printed and fed back gives %s", f.Name, a, b)
		}
	}
}

// TestServeConfigErrors: what is wrong in a config file is said with the
// file's line, and serve does not start.
func TestServeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown key", "listen: 127.0.0.1:7777\n\ndsik: 10g\n", `:3: unknown key "dsik": did you mean disk?`},
		{"dashes", "pool: 2\n--pool: 3\n", `:2: unknown key "--pool": write it without the dashes: pool`},
		{"not a flag at all", "flavour: vanilla\n", `:1: unknown key "flavour": harvest serve has no such flag`},
		{"config in config", "config: other.yaml\n", `:1: unknown key "config": --config is not a setting`},
		{"twice", "pool: 2\nlisten: x:1\npool: 3\n", ":3: pool is set twice (first at line 1)"},
		{"yes is not a bool", "quiet: yes\n", `:1: quiet takes true or false, not "yes"`},
		{"list for one value", "pool:\n  - 1\n  - 2\n", ":2: pool takes one value, like pool: 2"},
		{"mapping for a list", "repo-root: {a: b}\n", ":1: repo-root takes a list, like repo-root: [VALUE], not a mapping"},
		{"no value", "disk:\n", ":1: disk has no value: give one, or remove the key"},
		{"bad duration", "# comment\nshutdown-grace: 30\n", `:2: shutdown-grace: "30": time: missing unit in duration "30"`},
		{"bad int", "pool: many\n", `:1: pool: "many": `},
		{"bad list item", "git-host:\n  - a\n  - [b]\n", ":3: git-host takes a list of values"},
		{"syntax", "listen: 127.0.0.1:7777\nrepo-root: [/a\n", ":2: YAML syntax: "},
		{"two documents", "pool: 2\n---\npool: 3\n", ":2: a second YAML document"},
		{"not a mapping", "- listen\n- pool\n", ":1: the file must be a mapping of settings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.file)
			code, out, errs := harvestIn(t, "serve", "--config", path, "--print-config")
			if code != 2 || out != "" || !strings.Contains(errs, path+tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errs, path+tc.want)
			}
		})
	}
	code, _, errs := harvestIn(t, "serve", "--config", filepath.Join(t.TempDir(), "missing.yaml"), "--print-config")
	if code != 2 || !strings.Contains(errs, "missing.yaml: no such file") {
		t.Errorf("a missing file: exit %d, %q", code, errs)
	}
}

// TestServeConfigLaterErrors: a value serve refuses when it starts (not
// when the file is read) is reported with where the file set it.
func TestServeConfigLaterErrors(t *testing.T) {
	path := writeConfig(t, "listen: 127.0.0.1:0\npool: -1\n")
	code, _, errs := harvestIn(t, "serve", "--config", path)
	want := fmt.Sprintf("--pool -1: must be positive (--pool is set at %s:2)", path)
	if code != 2 || !strings.Contains(errs, want) {
		t.Errorf("exit %d, %q; want exit 2 and %q", code, errs, want)
	}
	// The command line's value is its own: no line of the file.
	code, _, errs = harvestIn(t, "serve", "--config", writeConfig(t, "pool: 2\n"), "--pool", "-3")
	if code != 2 || !strings.Contains(errs, "--pool -3: must be positive") || strings.Contains(errs, "is set at") {
		t.Errorf("a bad value on the command line: exit %d, %q", code, errs)
	}
}

// TestServeConfigPrecedence: the command line beats the file, which beats
// the environment, which beats the defaults; a list on the command line
// replaces the file's; $HARVEST_CONFIG names the file when --config does
// not; --print-config says where each value comes from.
func TestServeConfigPrecedence(t *testing.T) {
	path := writeConfig(t, "pool: 5\nlisten: 127.0.0.1:9\nrepo-root: [/from/file]\nstore: postgres://file@db/harvest\nquiet: true\n")
	t.Setenv("HARVEST_STORE", "postgres://env@db/harvest")
	t.Setenv("HARVEST_MODEL", "anthropic/from-env")
	t.Setenv(configEnv, "")
	code, out, errs := harvestIn(t, "serve", "--config", path, "--print-config", "--pool", "3", "--repo-root", "/from/flag", "--quiet=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"pool: 3 # from the command line",
		"listen: 127.0.0.1:9 # from " + path + ":2",
		"repo-root: # from the command line\n  - /from/flag\n",
		"store: postgres://file@db/harvest # from " + path + ":4",
		"model: anthropic/from-env # from $HARVEST_MODEL",
		"quiet: false # from the command line",
		"backend: local\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "/from/file") {
		t.Error("the command line's --repo-root was merged with the file's instead of replacing it")
	}

	// $HARVEST_CONFIG, and the environment when the file says nothing.
	t.Setenv(configEnv, writeConfig(t, "pool: 4\n"))
	code, out, errs = harvestIn(t, "serve", "--print-config")
	if code != 0 || !strings.Contains(out, "pool: 4 # from ") || !strings.Contains(out, "store: postgres://env@db/harvest # from $HARVEST_STORE") {
		t.Errorf("with $%s: exit %d %s\n%s", configEnv, code, errs, out)
	}
	// --config beats $HARVEST_CONFIG.
	code, out, _ = harvestIn(t, "serve", "--config", path, "--print-config")
	if code != 0 || !strings.Contains(out, "pool: 5 # from "+path) {
		t.Errorf("--config with $%s set: exit %d\n%s", configEnv, code, out)
	}
	// A mistake in a key the command line overrides is still one.
	code, _, errs = harvestIn(t, "serve", "--config", writeConfig(t, "pool: [1]\n"), "--pool", "2", "--print-config")
	if code != 2 || !strings.Contains(errs, ":1: pool takes one value") {
		t.Errorf("a bad value the command line overrides: exit %d %s", code, errs)
	}
}

// secretish are names of flags that may hold a secret: each such flag of
// serve must say whether its value is one (configSecret: never printed)
// or names a file that holds one (configSecretFile: the path is printed).
var secretish = regexp.MustCompile(`token|secret|passw|key|credential|dsn|auth($|[^o])|cookie|cert`) // auth, not author

// TestServePrintConfigRedacts: no credential given in any flag's value
// reaches --print-config's output: passwords and tokens in URLs, secret
// query parameters, password=... pairs, and whole secret settings.
func TestServePrintConfigRedacts(t *testing.T) {
	fl := newServeCmd().Flags()
	for _, f := range settable(fl) {
		if secretish.MatchString(f.Name) {
			if a := annotation(f, configAnnotation); a != configSecret && a != configSecretFile {
				t.Errorf("--%s may hold a secret: annotate it %s (its value is never printed) or %s (it names a file that holds one)", f.Name, configSecret, configSecretFile)
			}
		}
	}

	// Every value that can hold text holds credentials.
	var file strings.Builder
	for i, f := range settable(fl) {
		cred := fmt.Sprintf("https://user%d:S3CRET-pw-%d@host%d.example/path?token=S3CRET-q-%d&page=2", i, i, i, i)
		switch {
		case isList(f) && annotation(f, configAnnotation) == configKeyValue:
			fmt.Fprintf(&file, "%s: {a: %q, b: %q}\n", f.Name, cred, "host=db password=S3CRET-kv-"+f.Name)
		case isList(f):
			fmt.Fprintf(&file, "%s: [%q, %q]\n", f.Name, cred, "nats://S3CRET-token-"+f.Name+"@nats.example:4222")
		case f.Value.Type() == "string":
			fmt.Fprintf(&file, "%s: %q\n", f.Name, cred)
		}
	}
	path := writeConfig(t, file.String())
	t.Setenv(configEnv, "")
	t.Setenv("HARVEST_STORE", "")
	code, out, errs := harvestIn(t, "serve", "--config", path, "--print-config",
		"--store", "postgres://harvest:S3CRET-store@db:5432/harvest?sslmode=verify-full&sslpassword=S3CRET-ssl",
		"--nats", "nats://S3CRET-nats-token@nats.example:4222")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if i := strings.Index(out, "S3CRET"); i >= 0 {
		t.Fatalf("--print-config shows a secret: %q", out[max(0, i-80):min(len(out), i+40)])
	}
	for _, want := range []string{
		"store: postgres://harvest:REDACTED@db:5432/harvest?sslmode=verify-full&sslpassword=REDACTED # from the command line; credentials redacted",
		"nats: nats://REDACTED@nats.example:4222",
		"page=2", // what is not a secret stays
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q", want)
		}
	}
	// The environment's store, too.
	t.Setenv("HARVEST_STORE", "postgres://harvest:S3CRET-env@db/harvest")
	code, out, _ = harvestIn(t, "serve", "--print-config")
	if code != 0 || strings.Contains(out, "S3CRET") || !strings.Contains(out, "store: postgres://harvest:REDACTED@db/harvest # from $HARVEST_STORE; credentials redacted") {
		t.Errorf("$HARVEST_STORE's password: exit %d\n%s", code, out)
	}
}

// TestPrintConfigSecretSetting: a flag annotated as a secret (none of
// serve's holds one today: its GitHub secrets are files) is printed with
// no value, and the file printed is refused at that line until the secret
// is given.
func TestPrintConfigSecretSetting(t *testing.T) {
	fl := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fl.String("chat-token", "", "a token")
	fl.Int("workers", 1, "workers")
	annotate(fl, "chat-token", configAnnotation, configSecret)
	if err := fl.Parse([]string{"--chat-token", "S3CRET-token"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printServeConfig(&out, fl, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "S3CRET") || !strings.Contains(out.String(), "chat-token: # from the command line; a secret, not shown") {
		t.Fatalf("a secret setting printed:\n%s", out.String())
	}
	again := pflag.NewFlagSet("test", pflag.ContinueOnError)
	again.String("chat-token", "", "a token")
	again.Int("workers", 1, "workers")
	path := writeConfig(t, out.String())
	_, err := loadServeConfig(again, path)
	if err == nil || !strings.Contains(err.Error(), "chat-token has no value: give one, or remove the key") {
		t.Fatalf("the printed file fed back: %v, want it refused at the secret's line", err)
	}
}

// TestDocsConfigExample: the config file docs/running-a-server.md shows is
// one serve takes, key by key.
func TestDocsConfigExample(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "running-a-server.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## A config file\n")
	if !ok {
		t.Fatal(`docs/running-a-server.md has no "## A config file" section`)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	example, _, ok2 := strings.Cut(block, "```\n")
	if !ok || !ok2 {
		t.Fatal("the config file section of docs/running-a-server.md has no ```yaml example")
	}
	var keys map[string]any
	if err := yaml.Unmarshal([]byte(example), &keys); err != nil || len(keys) < 5 {
		t.Fatalf("the docs' example: %d keys, %v", len(keys), err)
	}
	fl := newServeCmd().Flags()
	if err := fl.Parse(nil); err != nil {
		t.Fatal(err)
	}
	c, err := loadServeConfig(fl, writeConfig(t, example))
	if err != nil {
		t.Fatalf("the docs' example: %v\n%s", err, example)
	}
	var names []string
	for k := range keys {
		names = append(names, k)
		if c.lines[k] == 0 {
			t.Errorf("the docs' example sets %s, which serve did not take", k)
		}
	}
	slices.Sort(names)
	t.Logf("the docs' example sets %s", strings.Join(names, ", "))
}
