package abi

// PayloadConnection is a network-stream session's data event: a socket of the server opened,
// changed or closed.
const PayloadConnection = "connection"

// Connection is one TCP socket of a server (a listening one has state listen): Action open
// (first seen), update (its counters or state changed), close (gone). BytesSent are the bytes
// the peer acknowledged, BytesReceived those received; RTTMs the smoothed round-trip time.
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
}

// NetworkStreamOptions are a network-stream session's creation options.
type NetworkStreamOptions struct {
	// IntervalMs is how often the sockets are listed (default 1000, at least 10).
	IntervalMs int `json:"intervalMs,omitempty"`
}
