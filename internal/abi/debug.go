package abi

// PayloadLogLine is a debug-stream session's data event: one line of what it follows.
const PayloadLogLine = "log-line"

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
}
