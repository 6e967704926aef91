package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// startClusterNodes runs a real nats-server (token required) and a gateway per name on it, all
// nodes of one cluster serving terminals.
func startClusterNodes(t *testing.T, names ...string) map[string]*assembled {
	t.Helper()
	srv, err := jetstore.StartEmbedded(testCtx(t), jetstore.EmbeddedOptions{Name: "nats", Dir: t.TempDir(), Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() }) // after the gateways' cleanups
	url := "nats://tok@" + strings.TrimPrefix(srv.ClientURL(), "nats://")
	out := map[string]*assembled{}
	for _, name := range names {
		work := t.TempDir()
		out[name] = runAssembled(t, gateway.Config{
			StateDir: testkit.ShortTempDir(t), Shell: "sh", IdleTimeout: -1, Types: []abi.SessionType{abi.TypeTerminal},
			Projects: func(string) (string, error) { return work, nil },
			Cluster:  &gateway.ClusterConfig{URLs: []string{url}, Node: name, Name: "rpc"},
		})
	}
	return out
}

// output is a session's terminal output from sequence after on, as cl polls it.
func output(ctx context.Context, cl *client.Client, id string, after uint64) (string, error) {
	r, err := cl.Poll(ctx, id, after, 0, 0, "")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, e := range r.Events {
		b.WriteString(eventOutput(e))
	}
	return b.String(), nil
}

func eventOutput(e abi.Event) string {
	if e.Event != abi.EventData {
		return ""
	}
	var out abi.TerminalOutput
	if json.Unmarshal(e.Payload, &out) != nil {
		return ""
	}
	b, _ := out.Bytes()
	return string(b)
}

// TestClusterTerminal: a terminal on node a is typed into, resized, run in and closed from
// node b, its output read from b and c; a WebSocket on c attached to it sees its output,
// resumes after a sequence, and its input and resizes reach a's shell.
func TestClusterTerminal(t *testing.T) {
	nodes := startClusterNodes(t, "a", "b", "c")
	a, b, c := nodes["a"], nodes["b"], nodes["c"]
	ctx := testCtx(t)
	s, err := a.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.SessionID
	sees := func(what string, cl *client.Client, after uint64, want string) {
		t.Helper()
		testkit.Eventually(t, what, func() bool {
			out, err := output(ctx, cl, id, after)
			return err == nil && strings.Contains(out, want)
		})
	}

	if err := b.cl.Send(ctx, id, []byte("echo hi-$((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	sees("b's input in a's log, read from b", b.cl, 0, "hi-42")
	sees("b's input in a's log, read from c", c.cl, 0, "hi-42")

	if _, err := b.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandResize, Width: 100, Height: 40}); err != nil {
		t.Fatal(err)
	}
	if err := c.cl.Send(ctx, id, []byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	sees("the size b set, read from c", c.cl, 0, "40 100")

	res, err := b.cl.Run(ctx, id, abi.RunRequest{Command: "echo run-$((5+5))"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), "run-10") {
		t.Errorf("run through b: %s", res)
	}

	// A WebSocket on c, from the newest event: a's output after it, c's input to a.
	last, err := c.cl.Poll(ctx, id, 1<<62, 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.cl.Dial(ctx, id, client.DialOptions{After: last.Next})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.Resize(ctx, 90, 30); err != nil {
		t.Fatal(err)
	}
	if err := conn.Send(ctx, []byte("echo ws-$((2*3)); stty size\n")); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	first := uint64(0)
	for !strings.Contains(seen.String(), "ws-6") || !strings.Contains(seen.String(), "30 90") {
		e, err := conn.Next(ctx)
		if err != nil {
			t.Fatalf("the stream on c: %v (seen %q)", err, seen.String())
		}
		if first == 0 {
			first = e.Seq
		}
		seen.WriteString(eventOutput(e))
	}
	if first != last.Next+1 {
		t.Errorf("the stream on c starts at %d, want %d", first, last.Next+1)
	}

	// Resume on b after an event c saw: the stream goes on from the next one.
	resumed, err := b.cl.Dial(ctx, id, client.DialOptions{After: first})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resumed.Close() }()
	if e, err := resumed.Next(ctx); err != nil || e.Seq != first+1 {
		t.Errorf("resumed on b after %d: %+v, %v", first, e, err)
	}

	// Input the gateway takes (under its 1 MiB body) but one NATS message cannot carry to a
	// (base64 in JSON) is refused with the ABI's code, not sent in part.
	livetest.WantCode(t, b.cl.Send(ctx, id, []byte(strings.Repeat("#", 800<<10))), abi.CodeInvalidArgument)

	got, err := b.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != abi.ResponseOK {
		t.Errorf("close through b: %+v", got)
	}
	for {
		_, err := conn.Next(ctx)
		if errors.Is(err, client.ErrStreamEnded) {
			break
		}
		if err != nil {
			t.Fatalf("the stream on c after the close: %v", err)
		}
	}
	if s, err := a.cl.Get(ctx, id); err != nil || s.Status != abi.StatusClosed {
		t.Errorf("a's session after b closed it: %+v, %v", s, err)
	}
	livetest.WantCode(t, b.cl.Send(ctx, id, []byte("x")), abi.CodeSessionClosed)
}
