package gitproxy

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

func pkts(lines ...string) []byte {
	var b []byte
	for _, l := range lines {
		if l == "" {
			b = appendFlush(b)
		} else {
			b = appendPkt(b, []byte(l))
		}
	}
	return b
}

// TestReadPushRequest: the command section is read exactly (shallow lines,
// capabilities, push options), and nothing of the pack.
func TestReadPushRequest(t *testing.T) {
	a, b, z := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("0", 40)
	head := pkts("shallow "+a+"\n", a+" "+b+" refs/heads/x\x00report-status side-band-64k push-options agent=git/2\n",
		z+" "+b+" refs/heads/y\n", "", "ci.skip\n", "")
	q, err := readPushRequest(bufio.NewReader(bytes.NewReader(append(append([]byte(nil), head...), "PACK..."...))), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(q.raw, head) {
		t.Errorf("raw %q, want %q", q.raw, head)
	}
	if len(q.commands) != 2 || q.commands[0] != (command{a, b, "refs/heads/x"}) || q.commands[1] != (command{z, b, "refs/heads/y"}) {
		t.Errorf("commands %+v", q.commands)
	}
	if !q.has("side-band-64k") || !q.has("report-status") || q.caps["agent"] != "git/2" {
		t.Errorf("caps %v", q.caps)
	}

	// git's probe before a large push: a lone flush.
	if q, err := readPushRequest(bufio.NewReader(strings.NewReader("0000")), 1<<20); err != nil || len(q.commands) != 0 || string(q.raw) != "0000" {
		t.Errorf("probe: %+v, %v", q, err)
	}
	for _, bad := range []string{"00", "zzzz", string(pkts("not a command\n", "")), string(pkts(a + " " + b + "\n"))} {
		if _, err := readPushRequest(bufio.NewReader(strings.NewReader(bad)), 1<<20); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := readPushRequest(bufio.NewReader(bytes.NewReader(pkts("push-cert\x00report-status\n"))), 1<<20); err == nil {
		t.Error("a signed push: no error")
	}
}

// TestReportReader: the report-status is found in a side-band stream fed
// in pieces of every size.
func TestReportReader(t *testing.T) {
	report := pkts("unpack ok\n", "ok refs/heads/a\n", "option refname refs/heads/a\n", "ng refs/heads/b pre-receive hook declined\n", "")
	var stream []byte
	stream = appendBand(stream, 2, []byte("remote progress\n"))
	stream = appendBand(stream, 1, report[:7])
	stream = appendBand(stream, 1, report[7:])
	stream = appendFlush(stream)
	for size := 1; size <= len(stream); size++ {
		rr := newReportReader(true)
		for i := 0; i < len(stream); i += size {
			rr.Write(stream[i:min(i+size, len(stream))])
		}
		if !rr.done || rr.unpack != "ok" || !rr.results["refs/heads/a"].ok || rr.results["refs/heads/b"] != (refResult{reason: "pre-receive hook declined"}) {
			t.Fatalf("pieces of %d: done %v unpack %q results %+v", size, rr.done, rr.unpack, rr.results)
		}
	}
}

// TestScrubber: the secret is masked, same length, however the stream is
// cut; nothing else is held back longer than it must be.
func TestScrubber(t *testing.T) {
	token := "ghs_SECRETsecret123"
	in := []byte("before " + token + " middle g gh " + token + token + " end")
	for size := 1; size <= len(in); size++ {
		s := newScrubber(token)
		var out []byte
		for i := 0; i < len(in); i += size {
			out = append(out, s.write(bytes.Clone(in[i:min(i+size, len(in))]))...)
		}
		out = append(out, s.flush()...)
		if len(out) != len(in) || bytes.Contains(out, []byte("SECRET")) || !bytes.HasSuffix(out, []byte(" end")) || !bytes.Contains(out, []byte(" middle g gh ")) {
			t.Fatalf("pieces of %d: %q", size, out)
		}
	}
	s := newScrubber(token)
	if got := s.write([]byte("line\n")); string(got) != "line\n" {
		t.Errorf("held back %q", got)
	}
}
