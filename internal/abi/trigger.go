package abi

// The wire types of /v1/cron and /v1/hooks: triggers (internal/trigger), which the gateway
// serves and internal/client decodes. They live here so a client links no scheduler and no
// database.

// TriggerTarget says where a trigger's message goes and how a new conversation is opened.
type TriggerTarget struct {
	// SessionKey is the conversation; a cron job's default is agent:<agent>:cron:<id>, a
	// hook's a new hook:<uuid> per call.
	SessionKey string `json:"sessionKey,omitempty"`
	// Mode is the message's queue mode there (default the conversation's).
	Mode string `json:"mode,omitempty"`
	// Agent, Backend, Model, Level and Workspace open a conversation that has no session
	// recorded (a conversation that had one is opened as it was).
	Agent     string `json:"agent,omitempty"`
	Backend   string `json:"backend,omitempty"`
	Model     string `json:"model,omitempty"`
	Level     string `json:"level,omitempty"`
	Workspace string `json:"workspace,omitempty"`
}

// CronJob is a cron job or a heartbeat.
type CronJob struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Schedule is a cron expression (five fields, or @hourly, @daily...; CRON_TZ=Zone
	// first for a time zone other than the gateway's); EveryMs a heartbeat's interval.
	Schedule string `json:"schedule,omitempty"`
	EveryMs  int64  `json:"everyMs,omitempty"`
	Message  string `json:"message"`
	Missed   string `json:"missed"`
	TriggerTarget
	CreatedAt int64 `json:"createdAt"`
	// LastRunAt is the scheduled time of the last run fired (or skipped) in Unix ms; Runs
	// counts the fired ones; LastMessageID is the last firing's message.
	LastRunAt     int64  `json:"lastRunAt,omitempty"`
	LastFiredAt   int64  `json:"lastFiredAt,omitempty"`
	LastMessageID string `json:"lastMessageId,omitempty"`
	LastError     string `json:"lastError,omitempty"`
	Runs          int    `json:"runs"`
	// NextRunAt is when it fires next (Unix ms), as of the listing.
	NextRunAt int64 `json:"nextRunAt,omitempty"`
}

// Hook is a webhook: POST /v1/hooks/{id} with its secret delivers the body as a message.
type Hook struct {
	ID string `json:"id"`
	TriggerTarget
	// DMScope routes a call that names a channel and a direct-message peer (main, per-peer,
	// per-channel-peer; default main: every DM of every channel in agent:<agent>:main).
	DMScope      string `json:"dmScope,omitempty"`
	CreatedAt    int64  `json:"createdAt"`
	LastCalledAt int64  `json:"lastCalledAt,omitempty"`
	Calls        int    `json:"calls"`
	// Secret is set only in AddHook's answer: it is shown once.
	Secret string `json:"secret,omitempty"`
}
