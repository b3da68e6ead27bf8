package sim

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// sseWriter writes server-sent events, flushing each one, and waits delay
// between events so a client sees a reply arrive piece by piece.
type sseWriter struct {
	ctx   context.Context
	w     http.ResponseWriter
	rc    *http.ResponseController
	delay time.Duration
	n     int
	err   error
}

func newSSE(ctx context.Context, w http.ResponseWriter, delay time.Duration) *sseWriter {
	return &sseWriter{ctx: ctx, w: w, rc: http.NewResponseController(w), delay: delay}
}

// event writes one event; name "" writes a data-only event (OpenAI's shape).
// After the first error every call is a no-op and err() reports it.
func (s *sseWriter) event(name string, data any) {
	if s.err != nil {
		return
	}
	if s.n > 0 && s.delay > 0 {
		if s.err = sleep(s.ctx, s.delay); s.err != nil {
			return
		}
	}
	s.n++
	var payload []byte
	switch v := data.(type) {
	case string:
		payload = []byte(v)
	default:
		if payload, s.err = json.Marshal(v); s.err != nil {
			return
		}
	}
	var b strings.Builder
	if name != "" {
		b.WriteString("event: ")
		b.WriteString(name)
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	b.Write(payload)
	b.WriteString("\n\n")
	if _, s.err = s.w.Write([]byte(b.String())); s.err != nil {
		return
	}
	s.err = s.rc.Flush()
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// textChunkWords is how many words each streamed text delta carries, in
// turn: the real APIs send a token or a few per delta, unevenly.
var textChunkWords = []int{2, 4, 1, 3, 5, 2, 3}

// splitText cuts s into the pieces a stream sends: a few words each, the
// space before a word starting its piece (" world"), and no piece longer than
// maxChunkBytes (long runs without spaces are cut at rune boundaries).
// Joining the pieces gives s back exactly.
func splitText(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	start, words, k := 0, 0, 0
	spaceStart, prevSpace := -1, false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if space && !prevSpace {
			spaceStart = i
		}
		switch {
		case !space && (i == 0 || prevSpace):
			words++
			if words > textChunkWords[k%len(textChunkWords)] && spaceStart > start {
				out = append(out, s[start:spaceStart])
				start, words = spaceStart, 1
				k++
			}
		case i-start >= maxChunkBytes:
			out = append(out, s[start:i])
			start, words = i, 0
			k++
		}
		prevSpace = space
	}
	return append(out, s[start:])
}

const maxChunkBytes = 48

// jsonChunkBytes is the size of each partial_json / arguments piece, in turn.
var jsonChunkBytes = []int{11, 17, 6, 23, 14, 9}

// splitJSON cuts a tool call's JSON arguments into partial pieces at rune
// boundaries, as the APIs stream them (the pieces are not valid JSON alone).
func splitJSON(s string) []string {
	var out []string
	k := 0
	for len(s) > 0 {
		n := jsonChunkBytes[k%len(jsonChunkBytes)]
		k++
		if n >= len(s) {
			out = append(out, s)
			break
		}
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns prefix followed by n random base-62 characters, the shape of
// the real APIs' ids (msg_01…, toolu_01…, call_…, chatcmpl-…).
func newID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return prefix + string(b)
}

// estimateTokens is the sim's token count when a script gives none: about
// four bytes a token, never zero.
func estimateTokens(n int) int {
	return max(1, (n+3)/4)
}

func intOr(p *int, def int) int {
	if p != nil {
		return *p
	}
	return def
}

// replyTokens estimates the output tokens of a reply.
func replyTokens(r *Reply) int {
	n := len(r.Thinking) + len(r.Text)
	for _, tc := range r.ToolCalls {
		n += len(tc.Name) + len(tc.Input)
	}
	return estimateTokens(n)
}

// retryAfterHeaders sets retry-after in whole seconds (rounded up), the way
// both APIs send it, and retry-after-ms with the exact value, which the
// official SDKs read first (OpenAI sends it too), so tests can retry quickly.
func retryAfterHeaders(h http.Header, d time.Duration) {
	secs := int((d + time.Second - 1) / time.Second)
	h.Set("retry-after", fmt.Sprint(secs))
	h.Set("retry-after-ms", fmt.Sprint(d.Milliseconds()))
}
