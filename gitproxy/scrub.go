package gitproxy

import (
	"bytes"
	"encoding/base64"
	"net/http"
)

// scrubber masks the upstream credential in what the upstream sends back,
// whatever the chunking: a chunk that ends with the first bytes of a
// secret keeps them back until the next chunk says whether the secret goes
// on. A secret is replaced by as many '*' as it has bytes, so pkt-line
// lengths and pack sizes stay right: a ref advertisement or an error
// message stays readable, and a pack that somehow held the token fails its
// checksum in the box rather than carrying it there.
type scrubber struct {
	secrets [][]byte
	pending []byte // held back: a suffix that is a prefix of some secret
}

// newScrubber scrubs token and the Basic credential made of it.
func newScrubber(token string) *scrubber {
	if token == "" {
		return &scrubber{}
	}
	basic := base64.StdEncoding.EncodeToString([]byte(upstreamUser + ":" + token))
	return &scrubber{secrets: [][]byte{[]byte(token), []byte(basic)}}
}

// write returns the bytes of b (after what was held back) that are safe to
// pass on.
func (s *scrubber) write(b []byte) []byte {
	if len(s.secrets) == 0 {
		return b
	}
	buf := append(s.pending, b...)
	s.mask(buf)
	hold := 0
	for _, k := range s.secrets {
		hold = max(hold, prefixSuffix(buf, k))
	}
	s.pending = append([]byte(nil), buf[len(buf)-hold:]...)
	return buf[:len(buf)-hold]
}

// flush returns what is held back, at the end of the stream.
func (s *scrubber) flush() []byte {
	out := s.pending
	s.pending = nil
	return out
}

// mask overwrites every whole secret in b.
func (s *scrubber) mask(b []byte) {
	for _, k := range s.secrets {
		for i := 0; ; {
			j := bytes.Index(b[i:], k)
			if j < 0 {
				break
			}
			copy(b[i+j:], bytes.Repeat([]byte{'*'}, len(k)))
			i += j + len(k)
		}
	}
}

// scrubString masks the secrets in s (header values, error strings).
func (s *scrubber) scrubString(v string) string {
	if len(s.secrets) == 0 {
		return v
	}
	b := []byte(v)
	s.mask(b)
	return string(b)
}

// prefixSuffix returns the length of the longest suffix of b that is a
// proper prefix of k.
func prefixSuffix(b, k []byte) int {
	if len(b) == 0 || bytes.IndexByte(k, b[len(b)-1]) < 0 {
		return 0 // the usual case: b ends in a byte the secret does not have
	}
	for n := min(len(k)-1, len(b)); n > 0; n-- {
		if bytes.Equal(b[len(b)-n:], k[:n]) {
			return n
		}
	}
	return 0
}

// copyHeaders copies to dst the response headers a git client uses, with
// the secrets masked. Everything else (cookies, WWW-Authenticate of the
// upstream's realm, rate-limit and account headers) stays on the host.
func (s *scrubber) copyHeaders(dst, src http.Header) {
	for _, name := range []string{"Content-Type", "Cache-Control", "Expires", "Pragma"} {
		if v := src.Get(name); v != "" {
			dst.Set(name, s.scrubString(v))
		}
	}
}
