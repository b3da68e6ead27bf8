package gitproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The pkt-line framing of git's wire protocol
// (Documentation/gitprotocol-common.txt): four hex digits giving the
// length of the line including themselves, then the data; "0000" is a
// flush packet. A data packet holds at most maxPktData bytes.
const (
	maxPktLen  = 65520
	maxPktData = maxPktLen - 4
	// maxBandData is what one side-band-64k packet carries after its band
	// byte.
	maxBandData = maxPktData - 1
)

// errFlush is returned by readPkt for a flush packet.
var errFlush = errors.New("flush packet")

// readPkt reads one pkt-line from r and appends its raw bytes (length
// included) to raw. It returns the data, or errFlush for a flush packet
// (and for the delim and response-end packets of protocol v2).
func readPkt(r *bufio.Reader, raw *bytes.Buffer) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	raw.Write(hdr[:])
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	if err != nil {
		return nil, fmt.Errorf("bad pkt-line length %q", hdr[:])
	}
	switch {
	case n < 4:
		return nil, errFlush
	case n > maxPktLen:
		return nil, fmt.Errorf("pkt-line of %d bytes, over the limit of %d", n, maxPktLen)
	}
	data := make([]byte, n-4)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	raw.Write(data)
	return data, nil
}

// appendPkt appends data as one pkt-line (data is at most maxPktData).
func appendPkt(b []byte, data []byte) []byte {
	b = fmt.Appendf(b, "%04x", len(data)+4)
	return append(b, data...)
}

// appendFlush appends a flush packet.
func appendFlush(b []byte) []byte { return append(b, "0000"...) }

// appendBand appends data on side-band band, split into packets.
func appendBand(b []byte, band byte, data []byte) []byte {
	for len(data) > 0 {
		n := min(len(data), maxBandData)
		b = fmt.Appendf(b, "%04x", n+5)
		b = append(b, band)
		b = append(b, data[:n]...)
		data = data[n:]
	}
	return b
}

// command is one ref update of a push.
type command struct {
	old, new, ref string
}

// pushRequest is the part of a receive-pack request before the pack.
type pushRequest struct {
	commands []command
	caps     map[string]string // the client's capabilities
	raw      []byte            // every byte read, to forward unchanged
}

func (q *pushRequest) has(capability string) bool {
	_, ok := q.caps[capability]
	return ok
}

// errUnsupported marks a push the proxy reads but does not forward.
type errUnsupported struct{ msg string }

func (e errUnsupported) Error() string { return e.msg }

// readPushRequest reads the command list of a receive-pack request (v0/v1,
// gitprotocol-pack.txt "Reference Update Request"): optional shallow lines,
// commands "old new ref", the first followed by NUL and the capabilities,
// a flush, and push options up to a flush when the client asked for
// push-options. A request with no command (git's auth probe, a lone flush)
// is valid. It reads no more than that, and at most limit bytes.
func readPushRequest(r *bufio.Reader, limit int) (*pushRequest, error) {
	q := &pushRequest{caps: map[string]string{}}
	var raw bytes.Buffer
	first := true
	for {
		if raw.Len() > limit {
			return nil, errUnsupported{fmt.Sprintf("the push's command list is over %d bytes; push fewer refs at once", limit)}
		}
		data, err := readPkt(r, &raw)
		if err == errFlush {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the push's commands: %w", err)
		}
		line := strings.TrimSuffix(string(data), "\n")
		if strings.HasPrefix(line, "shallow ") {
			continue
		}
		if strings.HasPrefix(line, "push-cert") {
			return nil, errUnsupported{"signed pushes are not supported; push without --signed"}
		}
		if first {
			first = false
			var caps string
			line, caps, _ = strings.Cut(line, "\x00")
			for _, c := range strings.Fields(caps) {
				k, v, _ := strings.Cut(c, "=")
				q.caps[k] = v
			}
		}
		f := strings.Fields(line)
		if len(f) != 3 || !isOID(f[0]) || !isOID(f[1]) {
			return nil, fmt.Errorf("reading the push's commands: malformed command %q", line)
		}
		q.commands = append(q.commands, command{old: f[0], new: f[1], ref: f[2]})
	}
	if len(q.commands) > 0 && q.has("push-options") {
		for {
			if raw.Len() > limit {
				return nil, errUnsupported{fmt.Sprintf("the push's options are over %d bytes", limit)}
			}
			_, err := readPkt(r, &raw)
			if err == errFlush {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading the push's options: %w", err)
			}
		}
	}
	q.raw = raw.Bytes()
	return q, nil
}

func isOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func isZeroOID(s string) bool { return strings.Trim(s, "0") == "" }

// pktScanner cuts a byte stream, fed in pieces, into pkt-lines.
type pktScanner struct {
	buf    []byte
	broken bool // the stream is not pkt-lines: stop
}

// feed adds b and calls fn for each whole packet (data nil for a flush).
func (s *pktScanner) feed(b []byte, fn func(data []byte, flush bool)) {
	if s.broken {
		return
	}
	s.buf = append(s.buf, b...)
	for len(s.buf) >= 4 {
		n, err := strconv.ParseUint(string(s.buf[:4]), 16, 16)
		if err != nil || n == 3 {
			s.broken = true
			s.buf = nil
			return
		}
		if n < 4 {
			s.buf = s.buf[4:]
			fn(nil, true)
			continue
		}
		if int(n) > len(s.buf) {
			return
		}
		fn(s.buf[4:n], false)
		s.buf = s.buf[n:]
	}
	if len(s.buf) == 0 {
		s.buf = nil // let the backing array go
	}
}

// reportReader follows a receive-pack result as it streams to the box and
// gathers its report-status (gitprotocol-pack.txt "Report Status"):
// "unpack ok" or "unpack <error>", then "ok <ref>" or "ng <ref> <reason>"
// for each ref (report-status-v2 adds "option" lines, which are ignored).
// With side-band-64k the report is on band 1 and band 3 carries a fatal
// error.
type reportReader struct {
	sideband     bool
	outer, inner pktScanner
	unpack       string
	results      map[string]refResult
	done         bool   // the report's flush was read
	fatal        string // a band 3 message
}

type refResult struct {
	ok     bool
	reason string
}

func newReportReader(sideband bool) *reportReader {
	return &reportReader{sideband: sideband, results: map[string]refResult{}}
}

// Write feeds the response's bytes; it never fails.
func (rr *reportReader) Write(b []byte) (int, error) {
	if !rr.sideband {
		rr.inner.feed(b, rr.report)
		return len(b), nil
	}
	rr.outer.feed(b, func(data []byte, flush bool) {
		if flush || len(data) == 0 {
			return
		}
		switch data[0] {
		case 1:
			rr.inner.feed(data[1:], rr.report)
		case 3:
			rr.fatal += string(data[1:])
		}
	})
	return len(b), nil
}

func (rr *reportReader) report(data []byte, flush bool) {
	if rr.done {
		return
	}
	if flush {
		rr.done = rr.unpack != ""
		return
	}
	line := strings.TrimSuffix(string(data), "\n")
	switch {
	case strings.HasPrefix(line, "unpack "):
		rr.unpack = strings.TrimPrefix(line, "unpack ")
	case strings.HasPrefix(line, "ok "):
		rr.results[strings.TrimPrefix(line, "ok ")] = refResult{ok: true}
	case strings.HasPrefix(line, "ng "):
		ref, reason, _ := strings.Cut(strings.TrimPrefix(line, "ng "), " ")
		rr.results[ref] = refResult{reason: reason}
	}
}

// refusalResult is the receive-pack result that refuses every ref of q:
// "unpack ok" and "ng <ref> <reason>" for each (what git prints as
// "! [remote rejected] <ref> (<reason>)"), on band 1 when the client asked
// for side-band-64k, with the reasons also on band 2, which git prints as
// "remote: " lines.
func refusalResult(q *pushRequest, refs []RefUpdate, messages []string) []byte {
	var report []byte
	if q.has("report-status") || q.has("report-status-v2") {
		report = appendPkt(report, []byte("unpack ok\n"))
		for _, r := range refs {
			report = appendPkt(report, []byte("ng "+r.Ref+" "+oneLine(r.Reason)+"\n"))
		}
		report = appendFlush(report)
	}
	if !q.has("side-band-64k") {
		return report
	}
	var out []byte
	for _, m := range messages {
		out = appendBand(out, 2, []byte(m+"\n"))
	}
	out = appendBand(out, 1, report)
	return appendFlush(out)
}

// oneLine keeps a reason on one pkt-line.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1000 {
		s = s[:1000]
	}
	return s
}
