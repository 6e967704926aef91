package conversation

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// The wire form of a history (GET /v1/chats/{ref}/history, docs/ABI.md) is NDJSON: one JSON
// object per line, each with one member naming what the line is:
//
//	{"history":{"leafId":…,"model":…,"thinkingLevel":…}}   first
//	{"message":<agent message>}                            one per message, the message verbatim
//	{"end":{"count":N}}                                    last line of a complete answer
//	{"error":<ABI error response>}                         last line instead, when reading failed
//
// A message is spliced in as stored, never re-encoded, and a transcript line holds no newline,
// so a message is always one line. An answer without its end line was cut short.

// HistoryContentType is the media type of the wire form.
const HistoryContentType = "application/x-ndjson"

var (
	historyPrefix = []byte(`{"history":`)
	messagePrefix = []byte(`{"message":`)
	endPrefix     = []byte(`{"end":`)
	errorPrefix   = []byte(`{"error":`)
)

// WriteHistoryNDJSON writes h in the wire form. A context that cannot be read to the end is
// reported on the error line and returned; otherwise the error is w's.
func WriteHistoryNDJSON(w io.Writer, h *History, now time.Time) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	head, err := json.Marshal(h.Header)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	_, _ = bw.Write(historyPrefix)
	_, _ = bw.Write(head)
	_, _ = bw.WriteString("}\n")
	n := h.Count
	var readErr error
	if h.Messages != nil {
		for m, err := range h.Messages {
			if err != nil {
				readErr = err
				break
			}
			_, _ = bw.Write(messagePrefix)
			_, _ = bw.Write(m)
			_, _ = bw.WriteString("}\n")
			n++
		}
	}
	if readErr != nil {
		b, err := json.Marshal(abi.ErrorResponse(readErr, now))
		if err != nil {
			return fmt.Errorf("encode history error: %w", err)
		}
		_, _ = bw.Write(errorPrefix)
		_, _ = bw.Write(b)
		_, _ = bw.WriteString("}\n")
	} else {
		_, _ = bw.Write(endPrefix)
		_, _ = bw.WriteString(`{"count":` + strconv.Itoa(n) + "}}\n")
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	return readErr
}

// cutShort is a wire answer that ended before its end line, or that is not the wire form.
func cutShort(what string, err error) error {
	return &abi.Error{Code: abi.CodeConnectionLost, Message: "history stream " + what, Err: err}
}

// ReadHistoryNDJSON reads the wire form from body, which the returned History closes. With
// count (HistoryOptions.Count) the answer holds no message and Count is the end line's.
func ReadHistoryNDJSON(body io.ReadCloser, count bool) (*History, error) {
	lr := &lineReader{br: bufio.NewReaderSize(body, 256<<10)}
	line, err := lr.next()
	if err != nil {
		_ = body.Close()
		return nil, cutShort("ended before its header", err)
	}
	h := &History{Closer: body}
	if !bytes.HasPrefix(line, historyPrefix) || !bytes.HasSuffix(line, []byte("}")) {
		_ = body.Close()
		return nil, cutShort("does not start with a header", nil)
	}
	if err := json.Unmarshal(line[len(historyPrefix):len(line)-1], &h.Header); err != nil {
		_ = body.Close()
		return nil, cutShort("has a malformed header", err)
	}
	n := 0
	// end reads a final line: the end (checked against the messages read) or an error.
	end := func(line []byte) error {
		switch {
		case bytes.HasPrefix(line, endPrefix):
			var e struct {
				End struct {
					Count *int `json:"count"`
				} `json:"end"`
			}
			if err := json.Unmarshal(line, &e); err != nil || e.End.Count == nil {
				return cutShort("has a malformed end", err)
			}
			if !count && *e.End.Count != n {
				return cutShort(fmt.Sprintf("counted %d messages but carried %d", *e.End.Count, n), nil)
			}
			h.Count = *e.End.Count
			return nil
		case bytes.HasPrefix(line, errorPrefix):
			var e struct {
				Error abi.ControlResponse `json:"error"`
			}
			if err := json.Unmarshal(line, &e); err != nil {
				return cutShort("has a malformed error", err)
			}
			return abi.FromResponse(e.Error)
		}
		return cutShort("has a line of unknown kind", nil)
	}
	if count {
		line, err := lr.next()
		if err == nil {
			err = end(line)
		} else {
			err = cutShort("ended before its count", err)
		}
		if err != nil {
			_ = body.Close()
			return nil, err
		}
		h.Messages = func(func(json.RawMessage, error) bool) {}
		return h, nil
	}
	h.Messages = func(yield func(json.RawMessage, error) bool) {
		for {
			line, err := lr.next()
			if err != nil {
				yield(nil, cutShort("ended before its end line", err))
				return
			}
			if !bytes.HasPrefix(line, messagePrefix) {
				if err := end(line); err != nil {
					yield(nil, err)
				}
				return
			}
			if !bytes.HasSuffix(line, []byte("}")) {
				yield(nil, cutShort("has a malformed message line", nil))
				return
			}
			n++
			if !yield(line[len(messagePrefix):len(line)-1], nil) {
				return
			}
		}
	}
	return h, nil
}

// lineReader reads lines of any length; a line is valid until the next call.
type lineReader struct {
	br   *bufio.Reader
	long []byte
}

// next returns the next line without its newline; a last line without one is io.ErrUnexpectedEOF.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.br.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	// A line longer than the buffer (a large message) is assembled in a buffer of its own.
	l.long = append(l.long[:0], line...)
	for {
		line, err = l.br.ReadSlice('\n')
		l.long = append(l.long, line...)
		switch {
		case err == nil:
			return l.long[:len(l.long)-1], nil
		case !errors.Is(err, bufio.ErrBufferFull):
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
