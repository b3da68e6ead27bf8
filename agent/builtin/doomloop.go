package builtin

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
)

// Doom-loop detection, at least as strong as OpenHands' stuck detector. It
// watches the turn's sequence of tool calls (tool + normalised input), their
// errors and the assistant's messages, and recognises:
//
//	same_call     the same tool with the same input N times in a row
//	same_error    the same tool error N times in a row (any input)
//	same_message  the same non-empty assistant text N times in a row
//	cycle         A-B-A-B: two different calls alternating, twice over
//
// N is the agent's doom_loop_threshold (default 3). The first detection in a
// turn warns the model (its next request carries a note saying what it
// repeated); a detection after that ends the turn. Inputs are compared after
// re-encoding the JSON, so key order and spacing do not hide a repeat.

// DefaultDoomLoopThreshold is N when the agent does not set it.
const DefaultDoomLoopThreshold = 3

type loopDetector struct {
	threshold int
	calls     []string // keys of the turn's tool calls, in order
	callDesc  []string // human-readable versions, for the report
	errs      []string // per call: error key, or "" when it succeeded
	msgs      []string // the step's assistant texts (empty ones skipped)
	warned    bool
}

func newLoopDetector(threshold int) *loopDetector {
	if threshold < 2 {
		threshold = DefaultDoomLoopThreshold
	}
	return &loopDetector{threshold: threshold}
}

// detection is what the detector found.
type detection struct {
	pattern string // same_call | same_error | same_message | cycle
	detail  string
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return string(h.Sum(nil)[:12])
}

// canonicalJSON re-encodes JSON so equal inputs compare equal.
func canonicalJSON(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(bytes.TrimSpace(raw))
	}
	b, _ := json.Marshal(v) // maps marshal with sorted keys
	return string(b)
}

// call records one tool call and its outcome (errText empty on success).
func (d *loopDetector) call(tool string, input json.RawMessage, errText string) {
	in := canonicalJSON(input)
	d.calls = append(d.calls, digest(tool, in))
	desc := tool + " " + in
	if len(desc) > 120 {
		desc = desc[:117] + "..."
	}
	d.callDesc = append(d.callDesc, desc)
	if errText != "" {
		d.errs = append(d.errs, digest(tool, strings.TrimSpace(errText)))
	} else {
		d.errs = append(d.errs, "")
	}
}

// message records a step's assistant text.
func (d *loopDetector) message(text string) {
	if t := strings.TrimSpace(text); t != "" {
		d.msgs = append(d.msgs, digest(t))
	}
}

// check looks for a loop in what was recorded so far.
func (d *loopDetector) check() *detection {
	n := d.threshold
	if k := len(d.calls); k >= n && allEqual(d.calls[k-n:]) {
		return &detection{"same_call", fmt.Sprintf("called %s %d times in a row with the same input", d.callDesc[k-1], n)}
	}
	if k := len(d.errs); k >= n && d.errs[k-1] != "" && allEqual(d.errs[k-n:]) {
		return &detection{"same_error", fmt.Sprintf("got the same error %d times in a row (last call: %s)", n, d.callDesc[k-1])}
	}
	if k := len(d.msgs); k >= n && allEqual(d.msgs[k-n:]) {
		return &detection{"same_message", fmt.Sprintf("wrote the same message %d times in a row", n)}
	}
	if k := len(d.calls); k >= 4 {
		a, b := d.calls[k-2], d.calls[k-1]
		if a != b && d.calls[k-4] == a && d.calls[k-3] == b {
			return &detection{"cycle", fmt.Sprintf("alternated between %s and %s twice", d.callDesc[k-2], d.callDesc[k-1])}
		}
	}
	return nil
}

func allEqual(xs []string) bool {
	for _, x := range xs[1:] {
		if x != xs[0] {
			return false
		}
	}
	return true
}

// warning is the note the model gets after the first detection.
func (det *detection) warning() string {
	return "Harvest loop detector: you " + det.detail + ". Repeating it will not give a different result. " +
		"Step back: read the error or output carefully, try a different approach, or, if you are blocked, " +
		"write STUCK.md explaining the problem and what you tried, and stop. If you repeat yourself again the turn ends."
}

// reset forgets the history after a warning so only new repeats count.
func (d *loopDetector) reset() {
	d.calls, d.callDesc, d.errs, d.msgs = nil, nil, nil, nil
}
