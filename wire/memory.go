package wire

import "time"

// MemoryEntity is a node of a repository's memory graph (the MCP memory
// server's model): a name unique in its scope, a type and observations.
// Session and Turn are the write that created it ("" and 0: not an
// agent's turn; "api" for the API).
type MemoryEntity struct {
	Name         string               `json:"name"`
	Type         string               `json:"entityType"`
	Observations []*MemoryObservation `json:"observations"`
	Session      string               `json:"session,omitempty"`
	Turn         int                  `json:"turn,omitempty"`
	CreatedAt    time.Time            `json:"created_at"`
}

// MemoryObservation is one fact about an entity, with the write that
// recorded it.
type MemoryObservation struct {
	Text      string    `json:"text"`
	Session   string    `json:"session,omitempty"`
	Turn      int       `json:"turn,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// MemoryRelation is a directed edge between two entities of a scope.
type MemoryRelation struct {
	From      string    `json:"from"`
	To        string    `json:"to"`
	Type      string    `json:"relationType"`
	Session   string    `json:"session,omitempty"`
	Turn      int       `json:"turn,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// MemoryGraph is (part of) a scope's graph: entities by name (their
// observations oldest first), relations by from, to and type. GET
// /v1/memory answers one.
type MemoryGraph struct {
	Entities  []*MemoryEntity   `json:"entities"`
	Relations []*MemoryRelation `json:"relations"`
}

// MemoryEntityRequest is the body of PUT /v1/memory/entity: the entity
// gets exactly this type and these observations.
type MemoryEntityRequest struct {
	Type         string   `json:"entityType"`
	Observations []string `json:"observations"`
}
