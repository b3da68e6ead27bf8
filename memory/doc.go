// Package memory is a repository's memory that outlives its sessions:
// what an agent learned about a repository (how to build it, where things
// are, what failed) kept on the host, in Harvest's store, and given to the
// next agent on the repository, whatever its kind.
//
// # Model
//
// It is the knowledge graph of the reference MCP memory server
// (@modelcontextprotocol/server-memory), so agents that know that server
// know this one: entities (a name unique in the scope, an entity type,
// observations: one fact each) and directed relations between two entities
// (a relation type in the active voice). The tools have the reference
// server's names and argument shapes: create_entities, create_relations,
// add_observations, delete_entities, delete_observations,
// delete_relations, read_graph, search_nodes, open_nodes. Two departures,
// both for the sake of a clear error instead of a silent surprise: a
// relation's ends must exist, and the caps below.
//
// A graph belongs to a scope (store.MemoryScope): a repository, named by
// the key sessions and environments use (session.RepoKey:
// "github:owner/name", else what the source resolved to), and an owner
// (an API token id, "" for the memory every session on the repository
// shares). An agent's handler (Handler) is bound to one scope: it cannot
// name another, so a session on one repository never reads another's.
//
// Every write records the session and the turn it came from, and is
// committed to the store before the tool's result is returned: a result
// the agent saw survives a kill -9 of the server.
//
// # Trust
//
// Memory is written by agents, which read untrusted repositories and web
// pages: it is untrusted input to every later agent. So
//
//   - it is size-capped: per observation, per name, per call and per scope
//     (Limits), each refusal saying which cap and what to do;
//   - names and types are one line of printable text; observations may
//     hold newlines but no other control characters;
//   - a Hook (the server's, e.g. a command it runs) sees every write
//     before it is stored and may refuse it, with a reason the agent is
//     told;
//   - Digest, the part of memory put into an agent's instructions at the
//     start of a session, is bounded and fenced as quoted data with a
//     sentence saying it is notes from earlier agents, not instructions.
//
// Seed gives a repository's first session a starting graph (from its
// README and AGENTS.md), once: a scope is seeded only while it is empty
// and was never seeded, so deleting everything does not bring it back.
//
// # Concurrency
//
// A Service is safe for concurrent use and owns no goroutine. Handler's
// MCP server is stateless (a fresh MCP session per HTTP request, no
// server-side session to expire), so it holds nothing between requests
// either; a CommandHook's process is waited for before the write goes on.
package memory
