package jetstore

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configure a nats-server run inside this process.
type EmbeddedOptions struct {
	// Name names the server (a node's name); Dir holds its JetStream store.
	Name string
	Dir  string
	// Listen is the client address (default 127.0.0.1, any free port).
	Listen string
	// Cluster names the NATS cluster the routes form; ClusterListen is the route address
	// (needed with Routes; default 127.0.0.1, any free port). Routes are the other servers'
	// route URLs (nats-route://host:port). With neither, the server runs alone.
	Cluster       string
	ClusterListen string
	Routes        []string
	// Token, when set, is the secret a client must present (nats.Token); the routes between
	// servers are not covered by it.
	Token string
}

// StartEmbedded starts nats-server with JetStream in this process and returns it once it
// accepts clients. The caller shuts it down.
func StartEmbedded(ctx context.Context, o EmbeddedOptions) (*server.Server, error) {
	host, port, err := hostPort(o.Listen, "127.0.0.1", -1)
	if err != nil {
		return nil, fmt.Errorf("--nats-listen %q: %w", o.Listen, err)
	}
	opts := &server.Options{
		ServerName: o.Name, Host: host, Port: port, JetStream: true, StoreDir: o.Dir,
		NoSigs: true, NoLog: true, MaxPayload: 1 << 20, Authorization: o.Token,
	}
	// Every open session log follows its subject with an ordered consumer on the one events
	// stream: nats-server 2.15's default of 1,000 consumers per stream refused the 1,001st
	// (TestManyLogs). Unlimited here; an external deployment sets default_max_consumers: -1
	// (docs/cluster.md, capacity).
	opts.JetStreamLimits.DefaultMaxConsumers = -1
	if len(o.Routes) > 0 || o.ClusterListen != "" {
		ch, cp, err := hostPort(o.ClusterListen, "127.0.0.1", -1)
		if err != nil {
			return nil, fmt.Errorf("cluster address %q: %w", o.ClusterListen, err)
		}
		opts.Cluster = server.ClusterOpts{Name: o.Cluster, Host: ch, Port: cp}
		if opts.Cluster.Name == "" {
			opts.Cluster.Name = "nexus"
		}
		for _, r := range o.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("route %q: want nats-route://host:port", r)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("nats store: %w", err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	s.Start()
	// ReadyForConnections bounds its own wait; the context bounds ours.
	for !s.ReadyForConnections(100 * time.Millisecond) {
		// A server whose start failed (Fatalf to its logger) has stopped running.
		if err := ctx.Err(); err != nil {
			s.Shutdown()
			return nil, fmt.Errorf("embedded nats-server %s did not start: %w", o.Name, err)
		}
		if !s.Running() {
			return nil, fmt.Errorf("embedded nats-server %s did not start (a clustered server needs its routes: --nats-routes)", o.Name)
		}
	}
	return s, nil
}

// RouteURL is the URL other servers route to s at.
func RouteURL(s *server.Server) string {
	return "nats-route://" + s.ClusterAddr().String()
}

func hostPort(addr, defHost string, defPort int) (string, int, error) {
	if addr == "" {
		return defHost, defPort, nil
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if h == "" {
		h = defHost
	}
	return h, n, nil
}

// DialOptions say how a node reaches NATS.
type DialOptions struct {
	// URLs are the servers (user:password@ or token@ in a URL are its credentials).
	URLs []string
	// Creds is a credentials file (JWT and seed), NKey a seed file, CA the PEM file of the
	// certificate authority of the servers' TLS certificates.
	Creds, NKey, CA string
	// Name names the connection (the node) in the servers' monitoring.
	Name string
	// Token is the servers' client token (an embedded server's).
	Token string
}

// Dial connects to NATS and checks JetStream answers there. A server that cannot be reached is
// an error naming the URLs: a node never carries on alone.
func Dial(ctx context.Context, o DialOptions) (*nats.Conn, error) {
	where := strings.Join(redact(o.URLs), ",")
	// No reconnect buffer: a write while the connection is down fails at once rather than
	// being sent when it comes back, after its caller gave up on it (a session create that
	// failed on a node cut off from NATS came back as a record of a session nobody had).
	opts := []nats.Option{nats.Name(o.Name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1)}
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.NKey != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", o.NKey, err)
		}
		opts = append(opts, opt)
	}
	if o.CA != "" {
		opts = append(opts, nats.RootCAs(o.CA))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if deadline, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(deadline)))
	}
	nc, err := nats.Connect(strings.Join(o.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", where, err)
	}
	if _, err := nc.RTT(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("NATS at %s: %w", where, err)
	}
	return nc, nil
}

// redact hides the password or token of URLs, for messages.
func redact(urls []string) []string {
	out := make([]string, len(urls))
	for i, s := range urls {
		out[i] = s
		if u, err := url.Parse(s); err == nil && u.User != nil {
			u.User = url.User("***")
			out[i] = u.String()
		}
	}
	return out
}
