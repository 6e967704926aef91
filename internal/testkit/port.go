package testkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreeAddr returns a loopback address (127.0.0.1:port) that nothing listens on, for a server
// that must be told its port before it starts (a clustered nats-server's routes, a port a
// second start reuses). The port is drawn from below the kernel's ephemeral range: a port from
// a ":0" listen, closed and handed on, is in that range, where every outgoing connection and
// every other test's ":0" may take it before the server binds it (seen: a clustered server
// that never came up under load).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	lo := ephemeralLow()
	floor := max(lo-12000, 10000)
	for range 200 {
		port := floor + rand.IntN(lo-floor) //nolint:gosec // a port, not a secret
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err != nil {
			continue // taken
		}
		_ = ln.Close()
		return addr
	}
	tb.Fatal("no free loopback port below the ephemeral range")
	return ""
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &lo, &hi); err == nil && lo > 11000 {
			return lo
		}
	}
	return 32768
}
