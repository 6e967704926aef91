package abi

// The wire types of /v1/processes and /v1/servers: managed processes (internal/process), which
// the gateway serves and internal/client decodes. They live here so a client links no process
// management.

// ProcessSpec is what to run.
type ProcessSpec struct {
	Name    string   `json:"name,omitempty"`
	Project string   `json:"project,omitempty"`
	Command []string `json:"command"`
	// Dir is the working directory (absolute; default the gateway's).
	Dir string `json:"dir,omitempty"`
	// Env are extra NAME=VALUE variables over the gateway's environment.
	Env     []string `json:"env,omitempty"`
	Restart string   `json:"restart,omitempty"`
}

// ProcessInfo is a managed process as listed.
type ProcessInfo struct {
	ID string `json:"id"`
	ProcessSpec
	Status    string `json:"status"`
	PID       int    `json:"pid,omitempty"`
	StartedAt int64  `json:"startedAt,omitempty"`
	EndedAt   int64  `json:"endedAt,omitempty"`
	ExitCode  *int   `json:"exitCode,omitempty"`
	Signal    string `json:"signal,omitempty"`
	Restarts  int    `json:"restarts"`
	Reason    string `json:"reason,omitempty"`
	LogDir    string `json:"logDir"`
}

// ProcessLine is one line of a process's output (or a status change), numbered for its
// followers: what /v1/processes/{id}/logs answers.
type ProcessLine struct {
	// Seq numbers the process's lines from 1, across its runs: a follower resumes after one.
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Text   string `json:"line"`
	// Offset is where the line starts among all the bytes its stream ever wrote (its files
	// rotate; the offset goes on).
	Offset int64 `json:"offset"`
	Time   int64 `json:"time"`
	// Level is a gateway log line's level.
	Level string `json:"level,omitempty"`
}

// ProcessServer is a listening address a developer watches: a managed process's (ProcessID),
// one nexus does not manage (Addr alone), or the gateway.
type ProcessServer struct {
	Name      string `json:"name"`
	ProcessID string `json:"processId,omitempty"`
	Addr      string `json:"addr,omitempty"`
	BuiltIn   bool   `json:"builtIn,omitempty"`
}
