// Package event defines what happens in a Harvest session, as typed Go values.
//
// Every step of a session is an Event: an envelope (session, seq, time, and where
// relevant turn, agent, repo) around one typed payload (Data). Agents emit
// payloads; the session layer wraps them in envelopes, gives each the next seq of
// its session, stores it, then fans it out (issue 5). Inside the program events
// are these structs; the string Type is used only on the wire:
//
//	{"session":"s1","seq":7,"time":"...","turn":"t3","type":"tool.started","data":{...}}
//
// Payload types are a closed set registered in this package, so decoding an
// event read from the store or the API gives back the same typed payload.
//
// Delivery classes (which a fan-out may coalesce or drop under pressure, and
// which it must always deliver) are a property of the type: see Coalescable.
package event

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"
)

// Type names an event on the wire.
type Type string

// Payload is the typed content of an event.
type Payload interface {
	EventType() Type
}

// Event is one step of a session.
type Event struct {
	Session string    `json:"session"`
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Turn    string    `json:"turn,omitempty"`
	Agent   string    `json:"agent,omitempty"`
	Repo    string    `json:"repo,omitempty"`
	// Live numbers a live piece (1, 2, ...: see live.go): an event that
	// is delivered as it happens but never stored. Its Seq is that of the
	// stored event before it. 0 on every stored event.
	Live int     `json:"live,omitempty"`
	Data Payload `json:"-"`
}

// Type is the event's wire type.
func (e Event) Type() Type {
	if e.Data == nil {
		return ""
	}
	return e.Data.EventType()
}

type wire struct {
	Session string          `json:"session"`
	Seq     int64           `json:"seq"`
	Time    time.Time       `json:"time"`
	Turn    string          `json:"turn,omitempty"`
	Agent   string          `json:"agent,omitempty"`
	Repo    string          `json:"repo,omitempty"`
	Live    int             `json:"live,omitempty"`
	Type    Type            `json:"type"`
	Data    json.RawMessage `json:"data"`
}

// MarshalJSON writes the envelope with "type" and "data".
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Data == nil {
		return nil, fmt.Errorf("event %d of session %s has no payload", e.Seq, e.Session)
	}
	data, err := json.Marshal(e.Data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wire{e.Session, e.Seq, e.Time, e.Turn, e.Agent, e.Repo, e.Live, e.Data.EventType(), data})
}

// UnmarshalJSON reads an envelope and decodes "data" into the payload type
// registered for "type". An unknown type is an error.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	p, err := Decode(w.Type, w.Data)
	if err != nil {
		return err
	}
	*e = Event{Session: w.Session, Seq: w.Seq, Time: w.Time, Turn: w.Turn, Agent: w.Agent, Repo: w.Repo, Live: w.Live, Data: p}
	return nil
}

// Decode decodes a payload of the given type.
func Decode(t Type, data []byte) (Payload, error) {
	rt, ok := registry[t]
	if !ok {
		return nil, fmt.Errorf("unknown event type %q", t)
	}
	v := reflect.New(rt)
	if len(data) > 0 && string(data) != "null" {
		if err := json.Unmarshal(data, v.Interface()); err != nil {
			return nil, fmt.Errorf("event %s: %w", t, err)
		}
	}
	return v.Elem().Interface().(Payload), nil
}

// Types lists every registered event type.
func Types() []Type {
	out := make([]Type, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	return out
}

var registry = map[Type]reflect.Type{}

func register(p Payload) {
	t := p.EventType()
	if _, dup := registry[t]; dup {
		panic("event: duplicate type " + string(t))
	}
	registry[t] = reflect.TypeOf(p)
}

// Coalescable reports whether events of type t may be merged with their
// neighbours or dropped for a slow subscriber (token deltas, raw terminal
// bytes, tool output chunks): a reader can rebuild what it lost from the
// complete events that follow (assistant.message, tool.finished). Everything
// else — state changes, turn results, errors — is always delivered.
func Coalescable(t Type) bool {
	switch t {
	case TypeAssistantDelta, TypeThinkingDelta, TypeToolInputDelta, TypeToolOutput, TypeTerminalOutput:
		return true
	}
	return false
}
