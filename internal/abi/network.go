package abi

// PayloadConnection is a network-stream session's data event: a socket of the server opened,
// changed or closed.
const PayloadConnection = "connection"

// Connection is one TCP socket of a server (a listening one has state listen): Action open
// (first seen), update (its counters or state changed), close (gone). A connection that opened
// and ended between two listings comes as a close alone. BytesSent are the data bytes the peer
// acknowledged (neither SYN nor FIN, once all that was sent is acknowledged), BytesReceived
// those received (the peer's FIN counts one, as the kernel counts it); RTTMs the smoothed
// round-trip time. DurationMs, on a close the kernel reported, is how long the connection
// lived at least: from the listing that first saw it, or by the kernel's clocks (from the
// earliest of its last data sent, last data received and last acknowledgment received).
type Connection struct {
	Type          string  `json:"type"`
	Action        string  `json:"action"`
	Local         string  `json:"local"`
	Remote        string  `json:"remote"`
	State         string  `json:"state"`
	BytesSent     uint64  `json:"bytesSent"`
	BytesReceived uint64  `json:"bytesReceived"`
	RTTMs         float64 `json:"rttMs"`
	Retrans       uint32  `json:"retrans,omitempty"`
	Inode         uint32  `json:"inode,omitempty"`
	// DurationMs is set on a close the kernel reported (nil otherwise, where it is not known).
	DurationMs *float64 `json:"durationMs,omitempty"`
}

// NetworkStreamOptions are a network-stream session's creation options.
type NetworkStreamOptions struct {
	// IntervalMs is how often the sockets are listed (default 1000, at least 10).
	IntervalMs int `json:"intervalMs,omitempty"`
}
