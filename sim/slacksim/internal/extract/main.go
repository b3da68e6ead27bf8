// Command extract pins the parts of Slack's published descriptions
// (github.com/slackapi/slack-api-specs) that the stand-in is checked
// against, as test data for package slackschema:
//
//	go run ./sim/slacksim/internal/extract \
//	    -git /work/.mirror/slackapi+slack-api-specs/repo -commit bc08db4 \
//	    -out sim/slacksim/slackschema/descriptions
//
// -git is a clone (or bare git directory) of slackapi/slack-api-specs;
// the files are read at -commit with git show, so a dirty work tree does
// not matter. It writes:
//
//   - web-api.json: from web-api/slack_web_openapi_v2_without_examples.json
//     (Swagger 2.0), the paths of the methods in Methods, with every
//     definition they reference (transitively), and the document's header;
//     nothing inside a kept path or definition is changed.
//   - events-api.json: from events-api/slack_events_api_async_v1.json
//     (AsyncAPI 1.2), the topics in Topics and the components they use.
//   - event-wrapper.json: events-api/slack_common_event_wrapper_schema.json
//     without its "examples" (JSON Schema draft 7).
//   - SOURCE.json: the repository, the full commit, and for each file the
//     source path, the SHA-256 of the source file as it is at the commit,
//     the SHA-256 of the file written, and what was kept; methods the
//     stand-in serves that the description lacks are listed as missing.
//
// Changing Methods or Topics means running it again; slackschema's tests
// check SOURCE.json against the files.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Methods are the Web API methods the stand-in serves (slacksim.Methods
// must agree; slackschema's tests check it).
var Methods = []string{
	"api.test", "apps.connections.open", "auth.test",
	"chat.postMessage", "chat.update", "chat.postEphemeral", "chat.getPermalink", "chat.delete",
	"reactions.add", "reactions.remove",
	"conversations.replies", "conversations.info", "users.info", "views.open",
}

// Topics are the Events API topics the stand-in delivers: app_mention
// and the message events of channels, private channels and direct
// messages ("message" is the topic whose payload describes a deleted
// message).
var Topics = []string{"app.mention", "message", "message.channels", "message.groups", "message.im"}

const (
	webPath     = "web-api/slack_web_openapi_v2_without_examples.json"
	eventsPath  = "events-api/slack_events_api_async_v1.json"
	wrapperPath = "events-api/slack_common_event_wrapper_schema.json"
	repoName    = "slackapi/slack-api-specs"
)

// File is one pinned file, as SOURCE.json records it.
type File struct {
	Source       string   `json:"source"`
	SourceSHA256 string   `json:"source_sha256"`
	Pinned       string   `json:"pinned"`
	SHA256       string   `json:"sha256"`
	Kept         []string `json:"kept,omitempty"`
	Missing      []string `json:"missing,omitempty"`
}

// Source is SOURCE.json.
type Source struct {
	Repository string `json:"repository"`
	Commit     string `json:"commit"`
	Generator  string `json:"generator"`
	Web        File   `json:"web"`
	Events     File   `json:"events"`
	Wrapper    File   `json:"wrapper"`
}

func main() {
	gitDir := flag.String("git", "", "a clone of slackapi/slack-api-specs (work tree or git directory)")
	commit := flag.String("commit", "HEAD", "the commit to read")
	out := flag.String("out", "", "the directory to write")
	flag.Parse()
	if *gitDir == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: extract -git DIR -commit REV -out DIR")
		os.Exit(2)
	}
	if err := run(*gitDir, *commit, *out); err != nil {
		fmt.Fprintln(os.Stderr, "extract:", err)
		os.Exit(1)
	}
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return b, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func run(gitDir, rev, out string) error {
	full, err := git(gitDir, "rev-parse", rev+"^{commit}")
	if err != nil {
		return err
	}
	commit := strings.TrimSpace(string(full))
	src := Source{Repository: repoName, Commit: commit, Generator: "go run ./sim/slacksim/internal/extract"}
	read := func(path string) ([]byte, map[string]any, error) {
		b, err := git(gitDir, "show", commit+":"+path)
		if err != nil {
			return nil, nil, err
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return b, doc, nil
	}

	// The Web API.
	raw, doc, err := read(webPath)
	if err != nil {
		return err
	}
	paths := doc["paths"].(map[string]any)
	defs := doc["definitions"].(map[string]any)
	keptPaths := map[string]any{}
	var kept, missing []string
	for _, m := range Methods {
		p, ok := paths["/"+m]
		if !ok {
			missing = append(missing, m)
			continue
		}
		keptPaths["/"+m] = p
		kept = append(kept, m)
	}
	keptDefs := map[string]any{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				name, ok := strings.CutPrefix(ref, "#/definitions/")
				if ok {
					if _, seen := keptDefs[name]; !seen {
						d, ok := defs[name]
						if !ok {
							panic("dangling $ref " + ref)
						}
						keptDefs[name] = d
						walk(d)
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(keptPaths)
	web := map[string]any{}
	for _, k := range []string{"swagger", "info", "host", "basePath", "schemes", "securityDefinitions", "externalDocs"} {
		if v, ok := doc[k]; ok {
			web[k] = v
		}
	}
	web["paths"] = keptPaths
	web["definitions"] = keptDefs
	f, err := write(out, "web-api.json", web)
	if err != nil {
		return err
	}
	src.Web = File{Source: webPath, SourceSHA256: sum(raw), Pinned: "web-api.json", SHA256: f, Kept: kept, Missing: missing}

	// The Events API (AsyncAPI 1.2).
	raw, doc, err = read(eventsPath)
	if err != nil {
		return err
	}
	topics := doc["topics"].(map[string]any)
	keptTopics := map[string]any{}
	kept, missing = nil, nil
	for _, t := range Topics {
		if v, ok := topics[t]; ok {
			keptTopics[t] = v
			kept = append(kept, t)
		} else {
			missing = append(missing, t)
		}
	}
	events := map[string]any{}
	for _, k := range []string{"asyncapi", "info", "baseTopic", "servers", "externalDocs", "components"} {
		if v, ok := doc[k]; ok {
			events[k] = v
		}
	}
	events["topics"] = keptTopics
	f, err = write(out, "events-api.json", events)
	if err != nil {
		return err
	}
	src.Events = File{Source: eventsPath, SourceSHA256: sum(raw), Pinned: "events-api.json", SHA256: f, Kept: kept, Missing: missing}

	// The common event wrapper.
	raw, doc, err = read(wrapperPath)
	if err != nil {
		return err
	}
	delete(doc, "examples")
	if ev, ok := doc["properties"].(map[string]any)["event"].(map[string]any); ok {
		delete(ev, "examples")
	}
	f, err = write(out, "event-wrapper.json", doc)
	if err != nil {
		return err
	}
	src.Wrapper = File{Source: wrapperPath, SourceSHA256: sum(raw), Pinned: "event-wrapper.json", SHA256: f, Kept: []string{"all but examples"}}

	b, err := json.MarshalIndent(src, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "SOURCE.json"), append(b, '\n'), 0o644)
}

// write writes v as indented JSON (keys sorted, as encoding/json does)
// and returns the SHA-256 of what it wrote.
func write(dir, name string, v any) (string, error) {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return sum(b), os.WriteFile(filepath.Join(dir, name), b, 0o644)
}
