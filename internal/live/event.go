package live

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Output is the payload of a terminal data event: the exact bytes, rendered per subscriber in the
// content type it asked for.
type Output []byte

// Render implements Renderer: terminal output as ansi, text or raw (base64).
func (o Output) Render(ct abi.ContentType) any { return abi.NewTerminalOutput(o, ct) }

// Joined is a data payload already encoded as compact JSON, in parts written one after the
// other. A debug stream's batch is a prefix, a run of lines its process's capture encoded once
// for every session that follows it, and a suffix: no session copies the lines, and they are
// kept once however many sessions hold them.
type Joined [][]byte

// Len is the encoded length.
func (j Joined) Len() int {
	n := 0
	for _, p := range j {
		n += len(p)
	}
	return n
}

// AppendTo appends the encoded payload to b.
func (j Joined) AppendTo(b []byte) []byte {
	for _, p := range j {
		b = append(b, p...)
	}
	return b
}

// MarshalJSON implements json.Marshaler.
func (j Joined) MarshalJSON() ([]byte, error) { return j.AppendTo(make([]byte, 0, j.Len())), nil }

// Renderer is a payload whose wire form depends on the content type the reader asked for. An
// event caches one encoding per content type for such a payload, and one for all readers
// otherwise, so fifty subscribers cost one encoding, not fifty.
type Renderer interface {
	Render(ct abi.ContentType) any
}

// Event is one entry of a session's log. It is immutable once published; its wire encodings are
// computed once per content type and shared by every subscriber.
type Event struct {
	Seq       uint64
	Type      abi.EventType
	Time      time.Time
	SessionID string
	// Payload is one of the ABI's payload types, Output, any value that encodes to JSON, or
	// json.RawMessage (what an event read back from its canonical form carries when its type is
	// not one of the ABI's).
	Payload any

	enc [3]atomic.Pointer[[]byte]
}

func contentSlot(ct abi.ContentType) int {
	switch ct {
	case abi.ContentText:
		return 1
	case abi.ContentRaw:
		return 2
	}
	return 0
}

// render returns the value encoded as e's wire payload for ct, and the cache slot it goes in.
func (e *Event) render(ct abi.ContentType) (any, int) {
	if r, ok := e.Payload.(Renderer); ok {
		return r.Render(ct), contentSlot(ct)
	}
	return e.Payload, 0
}

// Wire returns the ABI envelope of e with its payload rendered as ct.
func (e *Event) Wire(ct abi.ContentType) abi.Event {
	v, _ := e.render(ct)
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	return abi.Event{Event: e.Type, Timestamp: abi.FormatTime(e.Time), SessionID: e.SessionID, Seq: e.Seq, Payload: b}
}

// JSON returns the encoded ABI envelope of e with its payload rendered as ct.
func (e *Event) JSON(ct abi.ContentType) []byte {
	slot := 0
	if _, ok := e.Payload.(Renderer); ok {
		slot = contentSlot(ct)
	}
	if p := e.enc[slot].Load(); p != nil {
		return *p
	}
	if j, ok := e.Payload.(Joined); ok {
		// Not cached: such an event has one reader as a rule (each session follows the shared
		// lines itself), and a cached frame would be a second copy of its lines per session.
		b, _ := e.appendJSON(make([]byte, 0, 96+j.Len()), ct)
		return b
	}
	b, err := e.appendJSON(make([]byte, 0, 96+e.size()), ct)
	if err != nil {
		b, err = json.Marshal(e.Wire(ct))
	}
	if err != nil { // payloads are our own types; this would be a programming error
		b = []byte(`{"event":"error","payload":{"type":"error","error":{"code":"INTERNAL","message":"unencodable event"}}}`)
	}
	e.enc[slot].Store(&b)
	return b
}

// AppendJSON appends what JSON returns to b; an event whose payload is Joined is encoded
// straight into b, so a writer that reuses its buffer copies the lines once.
func (e *Event) AppendJSON(b []byte, ct abi.ContentType) []byte {
	if _, ok := e.Payload.(Joined); ok {
		out, err := e.appendJSON(b, ct)
		if err == nil {
			return out
		}
	}
	return append(b, e.JSON(ct)...)
}

// appendJSON appends the ABI envelope of e (abi.Event's fields, in its order) around its
// payload rendered as ct. The envelope is written by hand: marshalling abi.Event re-validates
// and compacts a pre-encoded payload, which costs more than encoding the payload itself (4 KiB
// of terminal output: about 30µs instead of 10µs), and a batch of log lines arrives encoded. A
// json.RawMessage payload is copied as it is: it is the compact JSON nexus encoded (a debug
// stream's lines, an event read back from its canonical form). The bytes are those
// encoding/json writes for abi.Event (TestEventJSONMatchesABI).
func (e *Event) appendJSON(b []byte, ct abi.ContentType) ([]byte, error) {
	b = append(b, `{"event":`...)
	b = abi.AppendJSONString(b, string(e.Type))
	b = append(b, `,"timestamp":"`...)
	b = e.Time.UTC().AppendFormat(b, abi.TimeFormat)
	b = append(b, `","sessionId":`...)
	b = abi.AppendJSONString(b, e.SessionID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"payload":`...)
	switch v, _ := e.render(ct); p := v.(type) {
	case json.RawMessage:
		if len(p) == 0 {
			b = append(b, "null"...)
		} else {
			b = append(b, p...)
		}
	case Joined:
		b = p.AppendTo(b)
	default:
		enc, err := json.Marshal(p)
		if err != nil {
			return b, fmt.Errorf("encode %s event %d: %w", e.Type, e.Seq, err)
		}
		b = append(b, enc...)
	}
	return append(b, '}'), nil
}

// size is what e costs the log's byte budget.
func (e *Event) size() int {
	switch p := e.Payload.(type) {
	case Output:
		return len(p) + 128
	case json.RawMessage:
		return len(p) + 128
	case Joined:
		return p.Len() + 128
	}
	return 256
}

// outputBytes is what e adds to the output that flow control paces: terminal output, and the
// encoded data of a payload that comes encoded (a debug stream's lines), whose size the log's
// byte budget also counts; a reader lagging by more than that budget would be lapped.
func (e *Event) outputBytes() uint64 {
	switch p := e.Payload.(type) {
	case Output:
		return uint64(len(p))
	case json.RawMessage:
		return uint64(len(p))
	case Joined:
		return uint64(p.Len())
	}
	return 0
}

// retained reports whether e survives ring eviction: everything but data does, so a late reader
// still learns every status change, error and the close.
func (e *Event) retained() bool { return e.Type != abi.EventData }

// The canonical serialized form of an event is what an EventLog that leaves the process (a disk,
// a replica) stores: it needs no knowledge of payload types to keep or ship it, and
// UnmarshalEvent rebuilds the event, payload types included. Layout (integers little-endian or
// varints):
//
//	byte     format version (1)
//	byte     payload codec: 0 JSON, 1 output bytes
//	uvarint  seq
//	varint   time, Unix nanoseconds
//	uvarint  length of the event type, then its bytes
//	...      the payload: its JSON, or the exact output bytes
//
// The session id is not in it: a log belongs to one session.
const (
	canonicalVersion = 1
	codecJSON        = 0
	codecOutput      = 1
)

// AppendBinary appends e's canonical serialized form to b.
func (e *Event) AppendBinary(b []byte) ([]byte, error) {
	codec := byte(codecJSON)
	var payload []byte
	switch p := e.Payload.(type) {
	case Output:
		codec, payload = codecOutput, p
	case json.RawMessage:
		payload = p
	case Joined:
		b = append(b, canonicalVersion, codecJSON)
		b = binary.AppendUvarint(b, e.Seq)
		b = binary.AppendVarint(b, e.Time.UnixNano())
		b = binary.AppendUvarint(b, uint64(len(e.Type)))
		b = append(b, e.Type...)
		return p.AppendTo(b), nil
	default:
		var err error
		if payload, err = json.Marshal(p); err != nil {
			return b, fmt.Errorf("encode %s event %d: %w", e.Type, e.Seq, err)
		}
	}
	b = append(b, canonicalVersion, codec)
	b = binary.AppendUvarint(b, e.Seq)
	b = binary.AppendVarint(b, e.Time.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(e.Type)))
	b = append(b, e.Type...)
	return append(b, payload...), nil
}

// MarshalBinary returns e's canonical serialized form.
func (e *Event) MarshalBinary() ([]byte, error) {
	return e.AppendBinary(make([]byte, 0, 32+e.size()))
}

// ErrCorrupt is returned for a canonical form that does not decode.
var ErrCorrupt = errors.New("corrupt event record")

// UnmarshalEvent rebuilds an event of session id from its canonical serialized form. The
// payload of an ABI event type comes back as its abi payload type, terminal output as Output,
// anything else as json.RawMessage; b is not retained.
func UnmarshalEvent(id string, b []byte) (*Event, error) {
	if len(b) < 2 || b[0] != canonicalVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrCorrupt)
	}
	codec := b[1]
	b = b[2:]
	seq, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: sequence number", ErrCorrupt)
	}
	b = b[n:]
	nanos, n := binary.Varint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: time", ErrCorrupt)
	}
	b = b[n:]
	tl, n := binary.Uvarint(b)
	if n <= 0 || tl > uint64(len(b)-n) {
		return nil, fmt.Errorf("%w: event type", ErrCorrupt)
	}
	typ := abi.EventType(b[n : n+int(tl)])
	b = b[n+int(tl):]
	e := &Event{Seq: seq, Type: typ, Time: time.Unix(0, nanos).UTC(), SessionID: id}
	switch codec {
	case codecOutput:
		e.Payload = Output(append([]byte(nil), b...))
	case codecJSON:
		p, err := decodePayload(typ, b)
		if err != nil {
			return nil, err
		}
		e.Payload = p
	default:
		return nil, fmt.Errorf("%w: unknown payload codec %d", ErrCorrupt, codec)
	}
	return e, nil
}

// decodePayload decodes the JSON payload of an event of type typ into the ABI's type for it.
func decodePayload(typ abi.EventType, b []byte) (any, error) {
	switch typ {
	case abi.EventStatus:
		return decodeAs[abi.StatusPayload](typ, b)
	case abi.EventError:
		return decodeAs[abi.ErrorPayload](typ, b)
	case abi.EventInterrupt:
		return decodeAs[abi.InterruptPayload](typ, b)
	case abi.EventMetadata:
		return decodeAs[abi.MetadataPayload](typ, b)
	case abi.EventClose:
		return decodeAs[abi.ClosePayload](typ, b)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: %s payload is not JSON", ErrCorrupt, typ)
	}
	return json.RawMessage(append([]byte(nil), b...)), nil
}

func decodeAs[T any](typ abi.EventType, b []byte) (any, error) {
	var p T
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: %s payload: %w", ErrCorrupt, typ, err)
	}
	return p, nil
}
