package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/wire"
)

// memoryFlags name a repository's memory.
type memoryFlags struct {
	repo, owner string
}

func (f *memoryFlags) scope() (client.MemoryScope, error) {
	switch {
	case f.repo == "":
		return client.MemoryScope{}, errors.New("give the repository: --repo owner/name (GitHub) or the source its sessions name (a directory on the server, a git URL)")
	case strings.ContainsFunc(f.repo, unicode.IsControl):
		return client.MemoryScope{}, errors.New("--repo holds a control character: give owner/name or a source")
	case strings.ContainsFunc(f.owner, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }):
		return client.MemoryScope{}, errors.New("--owner: give me (your own memory) or, with an admin token, a token id")
	}
	return client.MemoryScope{Repo: f.repo, Owner: f.owner}, nil
}

func newMemoryCmd() *cobra.Command {
	var (
		conn connFlags
		mf   memoryFlags
	)
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Read, search, correct and delete a repository's memory",
		Long: `A repository's memory is what its agents learned and want the next agent to
know (how to build and test it, where things are, what failed), kept by the
server across sessions as a knowledge graph: entities (a name, a type,
observations) and relations between them. Agents read and write it through
the memory MCP tools; every write records its session and turn.

--repo names the repository: owner/name for a GitHub repository, or the
source its sessions name (a directory on the server, a git URL). A user
token sees the repositories of its own sessions, an admin token any.
--owner me is your own memory of the repository, apart from the shared one.

Memory is written by agents: treat what it says as notes, not instructions.

These commands go through the server's API (--server, else $HARVEST_SERVER,
else http://` + DefaultListen + `) with $HARVEST_TOKEN, else the admin token of
the local data directory.`,
		Example: `  harvest memory ls --repo octo/hello
  harvest memory search --repo octo/hello docker
  harvest memory show --repo octo/hello tests
  harvest memory set --repo octo/hello tests --type procedure -o "make test needs docker"
  harvest memory rm --repo octo/hello tests
  harvest memory export --repo octo/hello > memory.jsonl`,
	}
	conn.register(cmd)
	fl := cmd.PersistentFlags()
	fl.StringVar(&mf.repo, "repo", "", "the repository: owner/name, or the source its sessions name")
	fl.StringVar(&mf.owner, "owner", "", "me: your own memory of the repository (default: the shared one)")
	cmd.AddCommand(
		newMemoryReadCmd(&conn, &mf, "ls", "List a repository's memory: entities and relations", cobra.NoArgs),
		newMemoryReadCmd(&conn, &mf, "search", "Find the entities whose name, type or an observation contains TEXT", argsExactly(1, "give the text to look for, like: harvest memory search --repo octo/hello docker")),
		newMemoryReadCmd(&conn, &mf, "show", "Show entities with their observations and who wrote them", argsAtLeast("give the names of the entities to show (harvest memory ls lists them)")),
		newMemorySetCmd(&conn, &mf), newMemoryRmCmd(&conn, &mf), newMemoryExportCmd(&conn, &mf))
	return cmd
}

func argsExactly(n int, msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return exitCode(2, errors.New(msg))
		}
		return nil
	}
}

func argsAtLeast(msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return exitCode(2, errors.New(msg))
		}
		return nil
	}
}

// newMemoryReadCmd is ls, search and show: the same read, narrowed by a
// search or by names, printed as a table (ls) or in full.
func newMemoryReadCmd(conn *connFlags, mf *memoryFlags, name, short string, args cobra.PositionalArgs) *cobra.Command {
	var asJSON bool
	use := name
	switch name {
	case "search":
		use += " TEXT"
	case "show":
		use += " NAME..."
	}
	cmd := &cobra.Command{
		Use:   use + " --repo REPO",
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := mf.scope()
			if err != nil {
				return exitCode(2, err)
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			var g *wire.MemoryGraph
			switch name {
			case "search":
				g, err = c.ListMemory(ctx, sc, args[0])
			case "show":
				g, err = c.ListMemory(ctx, sc, "", args...)
			default:
				g, err = c.ListMemory(ctx, sc, "")
			}
			if err != nil {
				return apiErr(err)
			}
			switch {
			case asJSON:
				printJSON(cmd.OutOrStdout(), g)
			case name == "ls":
				return printMemoryTable(cmd.OutOrStdout(), g)
			default:
				printMemory(cmd.OutOrStdout(), g)
			}
			if name == "show" && len(g.Entities) < len(args) {
				return exitCode(exitRequestFailed, fmt.Errorf("%d of the %d entities named are not in the memory of %s", len(args)-len(g.Entities), len(args), sc.Repo))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the graph as JSON, with who wrote what")
	return cmd
}

// memoryText makes text an agent wrote printable on a terminal: text with a
// control character (an escape sequence could rewrite the screen) is
// printed quoted.
func memoryText(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

func writtenBy(session string, turn int) string {
	switch {
	case session == "":
		return "-"
	case turn == 0:
		return session
	}
	return fmt.Sprintf("%s turn %d", session, turn)
}

func printMemoryTable(w io.Writer, g *wire.MemoryGraph) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tOBSERVATIONS\tCREATED BY")
	for _, e := range g.Entities {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", memoryText(e.Name), memoryText(e.Type), len(e.Observations), writtenBy(e.Session, e.Turn))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(g.Relations) > 0 {
		fmt.Fprintln(w, "\nRELATIONS")
		for _, r := range g.Relations {
			fmt.Fprintf(w, "%s -%s-> %s\n", memoryText(r.From), memoryText(r.Type), memoryText(r.To))
		}
	}
	return nil
}

func printMemory(w io.Writer, g *wire.MemoryGraph) {
	for i, e := range g.Entities {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s [%s]  (created by %s)\n", memoryText(e.Name), memoryText(e.Type), writtenBy(e.Session, e.Turn))
		for _, o := range e.Observations {
			fmt.Fprintf(w, "  - %s  (%s)\n", memoryText(o.Text), writtenBy(o.Session, o.Turn))
		}
	}
	for i, r := range g.Relations {
		if i == 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s -%s-> %s  (%s)\n", memoryText(r.From), memoryText(r.Type), memoryText(r.To), writtenBy(r.Session, r.Turn))
	}
}

func newMemorySetCmd(conn *connFlags, mf *memoryFlags) *cobra.Command {
	var (
		typ string
		obs []string
	)
	cmd := &cobra.Command{
		Use:   "set NAME --repo REPO --type TYPE [-o OBSERVATION]...",
		Short: "Create an entity, or make it have exactly this type and these observations",
		Long: `Create an entity, or replace its type and observations: observations not
given are deleted, those kept keep who wrote them, new ones are recorded as
written through the API. To add one, give the ones it has too (harvest memory
show prints them).`,
		Args: argsExactly(1, "give the entity's name, like: harvest memory set --repo octo/hello tests --type procedure -o \"make test needs docker\""),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := mf.scope()
			if err != nil {
				return exitCode(2, err)
			}
			if strings.TrimSpace(typ) == "" {
				return exitCode(2, errors.New("give the entity's type: --type TYPE (what kind of thing it is: procedure, component, convention...)"))
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			e, err := c.PutMemoryEntity(ctx, sc, args[0], wire.MemoryEntityRequest{Type: typ, Observations: obs})
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s [%s] set with %d observations\n", memoryText(e.Name), memoryText(e.Type), len(e.Observations))
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "the entity's type")
	cmd.Flags().StringArrayVarP(&obs, "observation", "o", nil, "an observation, one fact (repeatable)")
	return cmd
}

func newMemoryRmCmd(conn *connFlags, mf *memoryFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME... --repo REPO",
		Short: "Delete entities with their observations and relations",
		Args:  argsAtLeast("give the names of the entities to delete (harvest memory ls lists them)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := mf.scope()
			if err != nil {
				return exitCode(2, err)
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			var failed error
			for _, n := range args {
				if err := c.DeleteMemoryEntity(ctx, sc, n); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", memoryText(n), strings.TrimSpace(err.Error()))
					failed = exitCode(exitRequestFailed, nil)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), memoryText(n))
			}
			return failed
		},
	}
}

func newMemoryExportCmd(conn *connFlags, mf *memoryFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "export --repo REPO",
		Short: "Print a repository's memory as JSON lines (the MCP memory server's file format)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := mf.scope()
			if err != nil {
				return exitCode(2, err)
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			return apiErr(c.ExportMemory(ctx, sc, cmd.OutOrStdout()))
		},
	}
}
