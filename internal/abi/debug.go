package abi

import (
	"encoding/json"
	"strconv"
)

// PayloadLogLine is a debug-stream session's data event: one line of what it follows.
const PayloadLogLine = "log-line"

// PayloadLogLines is the data event of a debug-stream session created with option batch: the
// lines that were ready together, each a log-line payload, in order.
const PayloadLogLines = "log-lines"

// Log-line streams.
const (
	StreamStdout  = "stdout"
	StreamStderr  = "stderr"
	StreamGateway = "gateway"
	StreamFile    = "file"
)

// LogLine is one line a debug-stream session follows: a managed process's stdout or stderr,
// the gateway's own log (stream gateway, with its level), or a file's line. Offset is where
// the line starts: among all the bytes the process's stream wrote (its files rotate, the
// offset goes on), or in its file (Gen counts the file's rotations and truncations seen).
type LogLine struct {
	Type   string `json:"type"`
	Stream string `json:"stream"`
	Line   string `json:"line"`
	Level  string `json:"level,omitempty"`
	Offset int64  `json:"offset"`
	Gen    int    `json:"gen,omitempty"`
}

// LogLines is the payload of a batched debug-stream data event (option batch).
type LogLines struct {
	Type  string    `json:"type"`
	Lines []LogLine `json:"lines"`
}

// DebugStreamOptions are a debug-stream session's creation options (CreateRequest.Options),
// besides its context (processId or serverId).
type DebugStreamOptions struct {
	// File follows a log file nexus does not own (absolute path), by name, through rename and
	// copy-truncate rotations.
	File string `json:"file,omitempty"`
	// Lines is how many of the newest lines come first (default 100, -1: all there are).
	Lines int `json:"lines,omitempty"`
	// Grep keeps only the lines matching this regular expression (RE2 syntax).
	Grep string `json:"grep,omitempty"`
	// Batch delivers the lines that are ready together as one log-lines event (at most
	// BatchBytes of them) instead of one log-line event each: what a client that follows a
	// busy process asks for, since a flood then costs one frame per batch, not per line.
	Batch bool `json:"batch,omitempty"`
}

// BatchBytes bounds the lines of one log-lines event.
const BatchBytes = 64 << 10

// AppendJSON appends l encoded as encoding/json encodes it, byte for byte, without reflection:
// a debug stream encodes every line of a flood once and shares the bytes between its sessions.
func (l LogLine) AppendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = AppendJSONString(b, l.Type)
	b = append(b, `,"stream":`...)
	b = AppendJSONString(b, l.Stream)
	b = append(b, `,"line":`...)
	b = AppendJSONString(b, l.Line)
	if l.Level != "" {
		b = append(b, `,"level":`...)
		b = AppendJSONString(b, l.Level)
	}
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, l.Offset, 10)
	if l.Gen != 0 {
		b = append(b, `,"gen":`...)
		b = strconv.AppendInt(b, int64(l.Gen), 10)
	}
	return append(b, '}')
}

// jsonPlain marks the bytes encoding/json copies as they are in a string.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendJSONString appends s as a JSON string exactly as encoding/json writes it: printable
// ASCII is copied; anything it escapes (quotes, controls, <, >, &, U+2028, invalid UTF-8)
// takes encoding/json's own path.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			enc, err := json.Marshal(s)
			if err != nil { // a string always encodes
				panic(err)
			}
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
