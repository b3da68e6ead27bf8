package modelproxy

import (
	"bytes"
	"net/http"
)

// redacted replaces a real key found in a response.
var redacted = []byte("[REDACTED by Harvest]")

// scrubber replaces every secret in a byte stream with redacted, whatever
// the chunking: a chunk that ends with the first bytes of a secret keeps
// them back until the next chunk says whether the secret goes on. Only
// bytes that could start a secret are held, so a chunk ending in a newline
// (every SSE event does; keys have none) is passed on whole: streaming is
// not delayed.
type scrubber struct {
	secrets [][]byte
	pending []byte // held back: a suffix that is a prefix of some secret
}

// write returns the bytes of b (after what was held back) that are safe to
// pass on. The result is a new slice.
func (s *scrubber) write(b []byte) []byte {
	if len(s.secrets) == 0 {
		return append([]byte(nil), b...)
	}
	buf := append(s.pending, b...)
	buf = s.replace(buf)
	hold := 0
	for _, k := range s.secrets {
		hold = max(hold, prefixSuffix(buf, k))
	}
	out := append([]byte(nil), buf[:len(buf)-hold]...)
	s.pending = append(s.pending[:0:0], buf[len(buf)-hold:]...)
	return out
}

// flush returns what is held back, at the end of the stream.
func (s *scrubber) flush() []byte {
	out := s.pending
	s.pending = nil
	return out
}

// replace replaces every whole secret in b.
func (s *scrubber) replace(b []byte) []byte {
	for _, k := range s.secrets {
		if bytes.Contains(b, k) {
			b = bytes.ReplaceAll(b, k, redacted)
		}
	}
	return b
}

// scrub returns b with every secret replaced (for whole bodies and header
// values).
func (s *scrubber) scrub(b []byte) []byte { return s.replace(b) }

// prefixSuffix returns the length of the longest suffix of b that is a
// proper prefix of k.
func prefixSuffix(b, k []byte) int {
	if len(b) == 0 || bytes.IndexByte(k, b[len(b)-1]) < 0 {
		return 0 // the usual case: b ends in a byte no key has
	}
	for n := min(len(k)-1, len(b)); n > 0; n-- {
		if bytes.Equal(b[len(b)-n:], k[:n]) {
			return n
		}
	}
	return 0
}

// scrubHeader replaces secrets in header values and drops headers that
// could carry something of the account to the box (cookies set by the API's
// edge).
func (s *scrubber) scrubHeader(h http.Header) {
	h.Del("Set-Cookie")
	for name, vs := range h {
		for i, v := range vs {
			if b := s.scrub([]byte(v)); !bytes.Equal(b, []byte(v)) {
				vs[i] = string(b)
			}
		}
		h[name] = vs
	}
}
