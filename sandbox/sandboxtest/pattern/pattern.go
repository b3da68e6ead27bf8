// Package pattern is the test data the box listener tests send both ways:
// n bytes, byte i being i % 251 (a prime, so no power-of-two chunking lines
// up with it and a dropped or repeated chunk changes the digest). It is its
// own package so that the probe binary run inside boxes and the tests on the
// host share it without the probe importing the testing package.
package pattern

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
)

// Reader is an io.Reader of N bytes of the pattern.
type Reader struct{ off, n int64 }

// New returns a Reader of n bytes.
func New(n int64) *Reader { return &Reader{n: n} }

func (p *Reader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := min(int64(len(b)), p.n-p.off)
	for i := range b[:k] {
		b[i] = byte((p.off + int64(i)) % 251)
	}
	p.off += k
	return int(k), nil
}

// SHA256 is the hex SHA-256 of n bytes of the pattern.
func SHA256(n int64) string {
	h := sha256.New()
	io.Copy(h, New(n))
	return hex.EncodeToString(h.Sum(nil))
}
