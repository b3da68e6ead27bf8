// Package proto is the wire protocol between Harvest (the host) and the in-box
// agent: one connection, many concurrent calls and process streams.
//
// # Frames
//
// Every frame is a 9-byte header and a payload:
//
//	uint32 length of (type + id + payload), big endian
//	uint8  type
//	uint32 id     call id (Call, Reply) or stream id (Data, EOF, Window, Exit)
//	payload
//
// Call and Reply payloads are uint32 jsonLen, a JSON object, then an optional
// binary blob (file contents), so bulk data is never base64'd. Data payloads are
// one byte naming the fd (0 stdin, 1 stdout, 2 stderr) followed by raw bytes.
//
// # Streams and flow control
//
// The host allocates stream ids and registers a stream before it sends the exec
// or attach call, so output can never arrive for an unknown stream. Output is
// credit based, like SSH channels: the agent sends at most Window bytes per fd
// until the host returns credit with Window frames as its consumer reads. When a
// consumer is slow, the agent stops reading that process's pipe and the process
// blocks on write: the backpressure lands on the process, never on the agent or
// on other streams. Stdin flows the same way in the other direction. The Exit
// frame of a stream is sent after its last Data and EOF frames.
//
// # Box listeners
//
// A forwarded connection is a stream too: listen opens a socket in the box,
// accept binds its next connection to a stream the host registered, and the
// connection's bytes flow as Data on fd 1 (box → host) and fd 0 (host → box)
// under the same credit rules, with EOF frames for half-closes and one Exit
// frame when both directions are done (ExitStatus.Error set if it broke).
// conn_close is closing the socket from the host side; no Exit follows it.
//
// # Box dials
//
// dial is the reverse: the agent connects from inside the box (to a loopback
// TCP port or a unix socket there) and binds the connection to a stream the
// host registered first, which then carries it exactly as an accepted
// connection. A dial in progress is cancelled with conn_close (Abort).
package proto

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is bumped on any incompatible change. Host and agent must match.
const Version = 1

// FrameType says what a frame carries.
type FrameType uint8

// Frame types.
const (
	TypeCall   FrameType = 1 // host → agent: a request
	TypeReply  FrameType = 2 // agent → host: the answer to a Call with the same id
	TypeData   FrameType = 3 // both: stream bytes (fd byte + data)
	TypeEOF    FrameType = 4 // both: fd byte; no more data on that fd
	TypeWindow FrameType = 5 // both: fd byte + uint32 credit increment
	TypeExit   FrameType = 6 // agent → host: JSON ExitStatus; the stream is done
)

const headerLen = 9

// MaxPayload bounds a frame's payload. File chunks are at most ChunkSize.
const (
	MaxPayload = 8 << 20
	ChunkSize  = 4 << 20
	// DefaultWindow is the initial credit per stream and direction.
	DefaultWindow = 256 << 10
	// MaxData is the largest Data payload either side sends.
	MaxData = 32 << 10
)

// Frame is one unit on the wire.
type Frame struct {
	Type    FrameType
	ID      uint32
	Payload []byte
}

// ErrFrameTooLarge means the peer sent a frame over MaxPayload: a protocol
// violation; the connection must be closed.
var ErrFrameTooLarge = errors.New("proto: frame too large")

// WriteFrame writes f as one frame. It is not safe for concurrent use: callers
// serialise writes (both sides have a single writer goroutine).
func WriteFrame(w *bufio.Writer, f Frame) error {
	if len(f.Payload) > MaxPayload {
		return ErrFrameTooLarge
	}
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(5+len(f.Payload)))
	h[4] = byte(f.Type)
	binary.BigEndian.PutUint32(h[5:9], f.ID)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(f.Payload)
	return err
}

// ReadFrame reads one frame. The payload is freshly allocated and owned by
// the caller.
func ReadFrame(r *bufio.Reader) (Frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	if n < 5 {
		return Frame{}, fmt.Errorf("proto: bad frame length %d", n)
	}
	if n-5 > MaxPayload {
		return Frame{}, ErrFrameTooLarge
	}
	f := Frame{Type: FrameType(h[4]), ID: binary.BigEndian.Uint32(h[5:9])}
	if n > 5 {
		f.Payload = make([]byte, n-5)
		if _, err := io.ReadFull(r, f.Payload); err != nil {
			return Frame{}, fmt.Errorf("proto: short frame: %w", err)
		}
	}
	return f, nil
}

// Call is the JSON head of a Call payload.
type Call struct {
	Method string          `json:"m"`
	Params json.RawMessage `json:"p,omitempty"`
}

// Reply is the JSON head of a Reply payload: an Error or a Result.
type Reply struct {
	Error  *Error          `json:"e,omitempty"`
	Result json.RawMessage `json:"r,omitempty"`
}

// EncodeMessage builds a Call or Reply payload from a JSON head and a blob.
func EncodeMessage(head any, blob []byte) ([]byte, error) {
	j, err := json.Marshal(head)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4+len(j)+len(blob))
	binary.BigEndian.PutUint32(out, uint32(len(j)))
	copy(out[4:], j)
	copy(out[4+len(j):], blob)
	return out, nil
}

// DecodeMessage splits a Call or Reply payload into its JSON head (decoded
// into head) and its blob.
func DecodeMessage(p []byte, head any) (blob []byte, err error) {
	if len(p) < 4 {
		return nil, errors.New("proto: short message")
	}
	n := binary.BigEndian.Uint32(p)
	if uint64(n) > uint64(len(p)-4) {
		return nil, errors.New("proto: message head overruns payload")
	}
	if err := json.Unmarshal(p[4:4+n], head); err != nil {
		return nil, fmt.Errorf("proto: bad message head: %w", err)
	}
	return p[4+n:], nil
}

// DataPayload builds a Data frame payload.
func DataPayload(fd byte, b []byte) []byte {
	out := make([]byte, 1+len(b))
	out[0] = fd
	copy(out[1:], b)
	return out
}

// WindowPayload builds a Window frame payload.
func WindowPayload(fd byte, n uint32) []byte {
	var out [5]byte
	out[0] = fd
	binary.BigEndian.PutUint32(out[1:], n)
	return out[:]
}

// ParseWindow decodes a Window frame payload.
func ParseWindow(p []byte) (fd byte, n uint32, err error) {
	if len(p) != 5 {
		return 0, 0, errors.New("proto: bad window payload")
	}
	return p[0], binary.BigEndian.Uint32(p[1:]), nil
}
