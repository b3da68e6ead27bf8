package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/harvest-dev/harvest/store"
)

// Scope is whose a graph is: a repository and an owner ("" shared).
type Scope = store.MemoryScope

// Entity, Relation, Observations and Deletion are the tools' argument
// shapes (the reference memory server's).
type (
	Entity struct {
		Name         string   `json:"name" jsonschema:"the entity's name, unique in this repository's memory"`
		EntityType   string   `json:"entityType" jsonschema:"what kind of thing it is, e.g. component, procedure, convention"`
		Observations []string `json:"observations" jsonschema:"facts about it, one each"`
	}
	Relation struct {
		From         string `json:"from" jsonschema:"the name of the entity the relation starts at"`
		To           string `json:"to" jsonschema:"the name of the entity the relation ends at"`
		RelationType string `json:"relationType" jsonschema:"the relation, in the active voice, e.g. depends_on"`
	}
	Observations struct {
		EntityName string   `json:"entityName" jsonschema:"the entity to add them to"`
		Contents   []string `json:"contents" jsonschema:"the facts to add, one each"`
	}
	Deletion struct {
		EntityName   string   `json:"entityName" jsonschema:"the entity to delete them from"`
		Observations []string `json:"observations" jsonschema:"the observations to delete, as they are"`
	}
)

// Op names a write (the tool's name; "set_entity" for the API's edit).
type Op string

const (
	OpCreateEntities     Op = "create_entities"
	OpCreateRelations    Op = "create_relations"
	OpAddObservations    Op = "add_observations"
	OpDeleteEntities     Op = "delete_entities"
	OpDeleteObservations Op = "delete_observations"
	OpDeleteRelations    Op = "delete_relations"
	OpSetEntity          Op = "set_entity"
)

// Write is a write as a Hook sees it: its scope, who writes and what
// (only the fields of its Op are set).
type Write struct {
	Op      Op     `json:"op"`
	Scope   Scope  `json:"scope"`
	Session string `json:"session,omitempty"`
	Turn    int    `json:"turn,omitempty"`

	Entities     []Entity       `json:"entities,omitempty"`
	Relations    []Relation     `json:"relations,omitempty"`
	Observations []Observations `json:"observations,omitempty"`
	Deletions    []Deletion     `json:"deletions,omitempty"`
	EntityNames  []string       `json:"entityNames,omitempty"`
}

// Hook sees every write before it is stored; an error refuses it, and
// its text is the reason the writer is told.
type Hook func(ctx context.Context, w Write) error

// Limits cap what memory takes; zero fields are the defaults.
type Limits struct {
	// NameBytes caps an entity's name, an entity type and a relation type
	// (default 200).
	NameBytes int
	// ObservationBytes caps one observation (default 2000).
	ObservationBytes int
	// Items caps the entities, relations or observations of one call
	// (default 100).
	Items int
	// ScopeBytes caps a scope (store.Memory.MemorySize; default 256 KiB).
	ScopeBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.NameBytes <= 0 {
		l.NameBytes = 200
	}
	if l.ObservationBytes <= 0 {
		l.ObservationBytes = 2000
	}
	if l.Items <= 0 {
		l.Items = 100
	}
	if l.ScopeBytes <= 0 {
		l.ScopeBytes = 256 << 10
	}
	return l
}

// Config is what a Service is made of.
type Config struct {
	Store  store.Memory // required
	Limits Limits
	Hook   Hook // nil: every valid write is stored
}

// Service is the repositories' memory over a store: validation, caps,
// the hook, then the store. The MCP handler and the API both write
// through it.
type Service struct {
	st   store.Memory
	lim  Limits
	hook Hook
}

// New returns the Service of cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("memory: Config.Store is required")
	}
	return &Service{st: cfg.Store, lim: cfg.Limits.withDefaults(), hook: cfg.Hook}, nil
}

// Limits are the caps in force.
func (s *Service) Limits() Limits { return s.lim }

// InputError is a write or a read that breaks a rule: each problem says
// what is wrong and what to do.
type InputError struct{ Problems []string }

func (e *InputError) Error() string { return strings.Join(e.Problems, "; ") }

// RefusedError is a write the hook refused.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string {
	return "the server's memory hook refused this write: " + e.Reason
}

// Provenance is who writes: a session and its turn ("api" and 0 for the
// API).
type Provenance struct {
	Session string
	Turn    int
}

type checker struct {
	lim      Limits
	problems []string
}

func (c *checker) addf(format string, args ...any) {
	if len(c.problems) < 10 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

func (c *checker) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	return &InputError{Problems: c.problems}
}

// name checks a name or a type: one line of printable text.
func (c *checker) name(what, v string) {
	switch {
	case strings.TrimSpace(v) == "":
		c.addf("%s is empty: give a short name", what)
	case len(v) > c.lim.NameBytes:
		c.addf("%s is %d bytes, over the cap of %d: use a shorter name (put detail in observations)", what, len(v), c.lim.NameBytes)
	case !utf8.ValidString(v):
		c.addf("%s is not valid UTF-8", what)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		c.addf("%s %q holds a control character (a newline, a tab...): names and types are one line", what, v)
	}
}

// text checks an observation: printable text, newlines and tabs allowed.
func (c *checker) text(what, v string) {
	switch {
	case strings.TrimSpace(v) == "":
		c.addf("%s is empty: an observation is one fact", what)
	case len(v) > c.lim.ObservationBytes:
		c.addf("%s is %d bytes, over the cap of %d: split it into shorter facts", what, len(v), c.lim.ObservationBytes)
	case !utf8.ValidString(v):
		c.addf("%s is not valid UTF-8", what)
	case strings.IndexFunc(v, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) >= 0:
		c.addf("%s holds a control character other than a newline or a tab", what)
	}
}

func (c *checker) count(what string, n int) {
	switch {
	case n == 0:
		c.addf("%s is empty: give at least one", what)
	case n > c.lim.Items:
		c.addf("%s has %d items, over the cap of %d per call: split the call", what, n, c.lim.Items)
	}
}

func (c *checker) scope(sc Scope) {
	if sc.Repo == "" {
		c.addf("no repository: memory is kept per repository")
	}
}

// write checks w, asks the hook, then runs fn with the store's bound;
// a full scope becomes an error saying what to do.
func (s *Service) write(ctx context.Context, w Write, c *checker, fn func(store.MemoryWrite) error) error {
	c.scope(w.Scope)
	if err := c.err(); err != nil {
		return err
	}
	if s.hook != nil {
		if err := s.hook(ctx, w); err != nil {
			return &RefusedError{Reason: err.Error()}
		}
	}
	err := fn(store.MemoryWrite{Session: w.Session, Turn: w.Turn, MaxBytes: s.lim.ScopeBytes})
	if errors.Is(err, store.ErrMemoryFull) {
		return fmt.Errorf("%w: delete what is stale or redundant (delete_observations, delete_entities) and try again", err)
	}
	return err
}

func storeEntity(e Entity) *store.MemoryEntity {
	x := &store.MemoryEntity{Name: e.Name, Type: e.EntityType}
	for _, o := range e.Observations {
		x.Observations = append(x.Observations, &store.MemoryObservation{Text: o})
	}
	return x
}

// CreateEntities adds the entities the scope lacks and returns them.
func (s *Service) CreateEntities(ctx context.Context, sc Scope, by Provenance, es []Entity) ([]Entity, error) {
	c := &checker{lim: s.lim}
	c.count("entities", len(es))
	for i, e := range es {
		c.name(fmt.Sprintf("entities[%d].name", i), e.Name)
		c.name(fmt.Sprintf("entities[%d].entityType", i), e.EntityType)
		if len(e.Observations) > s.lim.Items {
			c.addf("entities[%d].observations has %d items, over the cap of %d per call", i, len(e.Observations), s.lim.Items)
		}
		for j, o := range e.Observations {
			c.text(fmt.Sprintf("entities[%d].observations[%d]", i, j), o)
		}
	}
	var out []Entity
	err := s.write(ctx, Write{Op: OpCreateEntities, Scope: sc, Session: by.Session, Turn: by.Turn, Entities: es}, c, func(w store.MemoryWrite) error {
		xs := make([]*store.MemoryEntity, 0, len(es))
		for _, e := range es {
			xs = append(xs, storeEntity(e))
		}
		got, err := s.st.CreateMemoryEntities(ctx, sc, xs, w)
		for _, e := range got {
			out = append(out, entityOf(e))
		}
		return err
	})
	return nonNil(out), err
}

// CreateRelations adds the relations the scope lacks and returns them.
func (s *Service) CreateRelations(ctx context.Context, sc Scope, by Provenance, rs []Relation) ([]Relation, error) {
	c := &checker{lim: s.lim}
	c.count("relations", len(rs))
	for i, r := range rs {
		c.name(fmt.Sprintf("relations[%d].from", i), r.From)
		c.name(fmt.Sprintf("relations[%d].to", i), r.To)
		c.name(fmt.Sprintf("relations[%d].relationType", i), r.RelationType)
	}
	var out []Relation
	err := s.write(ctx, Write{Op: OpCreateRelations, Scope: sc, Session: by.Session, Turn: by.Turn, Relations: rs}, c, func(w store.MemoryWrite) error {
		got, err := s.st.CreateMemoryRelations(ctx, sc, storeRelations(rs), w)
		if errors.Is(err, store.ErrNotFound) {
			return &InputError{Problems: []string{err.Error() + ": create the entity first (create_entities)"}}
		}
		for _, r := range got {
			out = append(out, Relation{From: r.From, To: r.To, RelationType: r.Type})
		}
		return err
	})
	return nonNil(out), err
}

func storeRelations(rs []Relation) []*store.MemoryRelation {
	xs := make([]*store.MemoryRelation, 0, len(rs))
	for _, r := range rs {
		xs = append(xs, &store.MemoryRelation{From: r.From, To: r.To, Type: r.RelationType})
	}
	return xs
}

// AddObservations adds to existing entities the facts they lack and
// returns, per entity, those it added.
func (s *Service) AddObservations(ctx context.Context, sc Scope, by Provenance, obs []Observations) ([]Observations, error) {
	c := &checker{lim: s.lim}
	c.count("observations", len(obs))
	for i, o := range obs {
		c.name(fmt.Sprintf("observations[%d].entityName", i), o.EntityName)
		c.count(fmt.Sprintf("observations[%d].contents", i), len(o.Contents))
		for j, t := range o.Contents {
			c.text(fmt.Sprintf("observations[%d].contents[%d]", i, j), t)
		}
	}
	var out []Observations
	err := s.write(ctx, Write{Op: OpAddObservations, Scope: sc, Session: by.Session, Turn: by.Turn, Observations: obs}, c, func(w store.MemoryWrite) error {
		// One store call per entity: each is its own transaction, so an
		// entity that is missing stops the call after the ones before it.
		for _, o := range obs {
			added, err := s.st.AddMemoryObservations(ctx, sc, o.EntityName, o.Contents, w)
			if errors.Is(err, store.ErrNotFound) {
				return &InputError{Problems: []string{err.Error() + ": create it first (create_entities)" + doneBefore(len(out))}}
			}
			if err != nil {
				return err
			}
			out = append(out, Observations{EntityName: o.EntityName, Contents: nonNil(added)})
		}
		return nil
	})
	return nonNil(out), err
}

func doneBefore(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (the observations of the %d entities before it were added)", n)
}

// DeleteEntities removes entities with their observations and relations;
// it returns how many there were.
func (s *Service) DeleteEntities(ctx context.Context, sc Scope, by Provenance, names []string) (int, error) {
	c := &checker{lim: s.lim}
	c.count("entityNames", len(names))
	n := 0
	err := s.write(ctx, Write{Op: OpDeleteEntities, Scope: sc, Session: by.Session, Turn: by.Turn, EntityNames: names}, c, func(store.MemoryWrite) error {
		var err error
		n, err = s.st.DeleteMemoryEntities(ctx, sc, names)
		return err
	})
	return n, err
}

// DeleteObservations removes facts from entities; it returns how many
// there were.
func (s *Service) DeleteObservations(ctx context.Context, sc Scope, by Provenance, ds []Deletion) (int, error) {
	c := &checker{lim: s.lim}
	c.count("deletions", len(ds))
	n := 0
	err := s.write(ctx, Write{Op: OpDeleteObservations, Scope: sc, Session: by.Session, Turn: by.Turn, Deletions: ds}, c, func(store.MemoryWrite) error {
		for _, d := range ds {
			k, err := s.st.DeleteMemoryObservations(ctx, sc, d.EntityName, d.Observations)
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	return n, err
}

// DeleteRelations removes relations; it returns how many there were.
func (s *Service) DeleteRelations(ctx context.Context, sc Scope, by Provenance, rs []Relation) (int, error) {
	c := &checker{lim: s.lim}
	c.count("relations", len(rs))
	n := 0
	err := s.write(ctx, Write{Op: OpDeleteRelations, Scope: sc, Session: by.Session, Turn: by.Turn, Relations: rs}, c, func(store.MemoryWrite) error {
		var err error
		n, err = s.st.DeleteMemoryRelations(ctx, sc, storeRelations(rs))
		return err
	})
	return n, err
}

// SetEntity makes an entity exactly e (creating it if missing): the API's
// edit.
func (s *Service) SetEntity(ctx context.Context, sc Scope, by Provenance, e Entity) (*store.MemoryEntity, error) {
	c := &checker{lim: s.lim}
	c.name("name", e.Name)
	c.name("entityType", e.EntityType)
	if len(e.Observations) > s.lim.Items {
		c.addf("observations has %d items, over the cap of %d", len(e.Observations), s.lim.Items)
	}
	for j, o := range e.Observations {
		c.text(fmt.Sprintf("observations[%d]", j), o)
	}
	var out *store.MemoryEntity
	err := s.write(ctx, Write{Op: OpSetEntity, Scope: sc, Session: by.Session, Turn: by.Turn, Entities: []Entity{e}}, c, func(w store.MemoryWrite) error {
		var err error
		out, err = s.st.SetMemoryEntity(ctx, sc, e.Name, e.EntityType, nonNil(e.Observations), w)
		return err
	})
	return out, err
}

// Read returns (part of) a scope's graph, with provenance.
func (s *Service) Read(ctx context.Context, sc Scope, q store.MemoryQuery) (*store.MemoryGraph, error) {
	c := &checker{lim: s.lim}
	c.scope(sc)
	if len(q.Search) > s.lim.NameBytes {
		c.addf("the search is %d bytes, over the cap of %d: search for a word or a name", len(q.Search), s.lim.NameBytes)
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return s.st.ReadMemory(ctx, sc, q)
}

// Export writes a scope's graph as the reference server's memory file
// does: JSON lines, {"type":"entity","name","entityType","observations"}
// then {"type":"relation","from","to","relationType"}.
func (s *Service) Export(ctx context.Context, sc Scope, w io.Writer) error {
	g, err := s.Read(ctx, sc, store.MemoryQuery{})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	for _, e := range g.Entities {
		x := entityOf(e)
		if err := enc.Encode(struct {
			Type string `json:"type"`
			Entity
		}{"entity", x}); err != nil {
			return err
		}
	}
	for _, r := range g.Relations {
		if err := enc.Encode(struct {
			Type string `json:"type"`
			Relation
		}{"relation", Relation{From: r.From, To: r.To, RelationType: r.Type}}); err != nil {
			return err
		}
	}
	return nil
}

func entityOf(e *store.MemoryEntity) Entity {
	x := Entity{Name: e.Name, EntityType: e.Type, Observations: []string{}}
	for _, o := range e.Observations {
		x.Observations = append(x.Observations, o.Text)
	}
	return x
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}
