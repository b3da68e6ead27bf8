package opencode

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Wire types: the parts of OpenCode's HTTP API (1.18.33) this package reads
// and writes, kept apart from Harvest's event payloads (mapping.go turns
// one into the other). Only the fields used are declared; the
// compatibility check (compat.go) makes sure they exist.

// ocEvent is one event of GET /event (an SSE "data:" line).
type ocEvent struct {
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
}

// ocSessionRef is the part of most events' properties naming the session.
type ocSessionRef struct {
	SessionID string `json:"sessionID"`
}

// ocMessageUpdated: message.updated.
type ocMessageUpdated struct {
	SessionID string    `json:"sessionID"`
	Info      ocMessage `json:"info"`
}

// ocMessage is a message's info (user or assistant).
type ocMessage struct {
	ID         string   `json:"id"`
	SessionID  string   `json:"sessionID"`
	Role       string   `json:"role"` // user | assistant
	ModelID    string   `json:"modelID"`
	ProviderID string   `json:"providerID"`
	Finish     string   `json:"finish"`
	Error      *ocError `json:"error"`
}

// ocPartUpdated: message.part.updated.
type ocPartUpdated struct {
	SessionID string `json:"sessionID"`
	Part      ocPart `json:"part"`
}

// ocPart is one part of a message: text, reasoning, tool, step-start,
// step-finish (and others this package ignores).
type ocPart struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID"`
	Type      string `json:"type"`
	// text, reasoning
	Text      string  `json:"text"`
	Synthetic bool    `json:"synthetic"`
	Ignored   bool    `json:"ignored"`
	Time      *ocTime `json:"time"`
	// tool
	CallID string       `json:"callID"`
	Tool   string       `json:"tool"`
	State  *ocToolState `json:"state"`
	// step-finish
	Reason string    `json:"reason"`
	Cost   float64   `json:"cost"`
	Tokens *ocTokens `json:"tokens"`
}

type ocTime struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// ocToolState is a tool part's state; Status is pending, running,
// completed or error.
type ocToolState struct {
	Status   string          `json:"status"`
	Input    json.RawMessage `json:"input"`
	Output   string          `json:"output"`
	Error    string          `json:"error"`
	Title    string          `json:"title"`
	Metadata json.RawMessage `json:"metadata"`
	Time     *ocTime         `json:"time"`
}

type ocTokens struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Cache     struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"cache"`
}

// ocPartDelta: message.part.delta, a piece of a text or reasoning part.
type ocPartDelta struct {
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID"`
	PartID    string `json:"partID"`
	Field     string `json:"field"`
	Delta     string `json:"delta"`
}

// ocStatus: session.status.
type ocStatus struct {
	SessionID string `json:"sessionID"`
	Status    struct {
		Type    string `json:"type"` // idle | busy | retry
		Attempt int    `json:"attempt"`
		Message string `json:"message"`
	} `json:"status"`
}

// ocSessionError: session.error.
type ocSessionError struct {
	SessionID string   `json:"sessionID"`
	Error     *ocError `json:"error"`
}

// ocError is one of OpenCode's named errors (APIError, ProviderAuthError,
// UnknownError, MessageAbortedError, MessageOutputLengthError,
// ContextOverflowError, ...).
type ocError struct {
	Name string `json:"name"`
	Data struct {
		Message    string `json:"message"`
		StatusCode int    `json:"statusCode"`
	} `json:"data"`
}

func (e *ocError) String() string {
	if e == nil {
		return ""
	}
	msg := strings.TrimSpace(e.Data.Message)
	switch {
	case msg == "":
		return e.Name
	case e.Data.StatusCode != 0:
		return e.Name + " (HTTP " + strconv.Itoa(e.Data.StatusCode) + "): " + msg
	}
	return e.Name + ": " + msg
}

// ocAsked: permission.asked and question.asked.
type ocAsked struct {
	ID         string `json:"id"`
	SessionID  string `json:"sessionID"`
	Permission string `json:"permission"`
}

// ocSession is the part of a Session (POST /session, GET /session/{id})
// this package reads.
type ocSession struct {
	ID        string `json:"id"`
	Directory string `json:"directory"`
	Version   string `json:"version"`
}

// ocHealth is GET /global/health.
type ocHealth struct {
	Healthy bool   `json:"healthy"`
	Version string `json:"version"`
}
