package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/provider"
)

// slowTool writes the path it is given (so level trusted asks before a path outside the
// workspace), says "compiling" and runs for runFor, or until its context ends.
type slowTool struct {
	runFor  time.Duration
	timeout time.Duration
	// deadline is how long the call's context had to live when it started to run.
	deadline time.Duration
}

func (s *slowTool) Spec() tools.Spec {
	return tools.Spec{Name: "slow", Description: "works for a while",
		Schema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"path": {Type: "string"}}},
		Paths:  tools.Paths{Writes: []string{"path"}, Show: []string{"path"}}, Timeout: s.timeout}
}

func (s *slowTool) Run(ctx context.Context, _ json.RawMessage) (tools.Result, error) {
	if dl, ok := ctx.Deadline(); ok {
		s.deadline = time.Until(dl)
	}
	tools.ProgressOf(ctx).Write("stdout", []byte("compiling\n"))
	select {
	case <-time.After(s.runFor):
		return tools.Result{Output: fmt.Sprintf("done after %s", s.runFor)}, nil
	case <-ctx.Done():
		return tools.Result{}, ctx.Err()
	}
}

// A confirmation left unanswered for ten minutes (far past the old fixed 30 s) stays pending;
// once allowed, the tool gets its whole timeout from that moment, runs past 30 s, and reports
// progress every interval from when it started to run, none while it waited for the user.
func TestConfirmationWaitIsNotTheToolsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws, outside := t.TempDir(), t.TempDir()
		perm, err := permission.New(permission.Config{Level: permission.Trusted, Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = perm.Close() }()
		reg := tools.NewRegistry(perm)
		slow := &slowTool{runFor: 95 * time.Second, timeout: 2 * time.Minute}
		if err := reg.Add(slow); err != nil {
			t.Fatal(err)
		}
		asked, answer := make(chan struct{}), make(chan permission.Answer)
		ts := &agent.Toolset{Registry: reg, Allowances: &permission.Allowances{},
			Confirm: func(ctx context.Context, _ provider.ToolCall, _ *permission.Request) (permission.Answer, error) {
				close(asked)
				return <-answer, nil
			}}
		args, _ := json.Marshal(map[string]string{"path": filepath.Join(outside, "x")})
		p := &scripted{t: t, replies: []provider.Message{reply(call("c1", "slow", string(args))), reply(provider.Text("built"))}}
		var r recorder
		done := make(chan *agent.Result, 1)
		go func() {
			res, err := agent.Run(context.Background(), p, ts, request("build it"), r.opts())
			if err != nil {
				t.Errorf("run: %v", err)
			}
			done <- res
		}()
		<-asked
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		select {
		case res := <-done:
			t.Fatalf("the turn ended while the confirmation was pending: %+v %+v", res, r.messages)
		default:
		}
		answer <- permission.AllowOnce
		res := <-done
		if res.End != agent.EndCompleted {
			t.Fatalf("end %s", res.End)
		}
		if m := r.messages[1]; m.IsError || m.Content[0].Text != "done after 1m35s" {
			t.Fatalf("result %+v", m)
		}
		if slow.deadline != 2*time.Minute {
			t.Fatalf("the tool had %s to run, want its whole timeout (2m)", slow.deadline)
		}
		var elapsed []time.Duration
		for _, e := range r.events {
			if e.Type == agent.EventToolProgress {
				if e.Call == nil || e.Call.ID != "c1" || e.Output != "compiling\n" {
					t.Fatalf("progress %+v", e)
				}
				elapsed = append(elapsed, e.Elapsed)
			}
		}
		if fmt.Sprint(elapsed) != "[10s 20s 30s 40s 50s 1m0s 1m10s 1m20s 1m30s]" {
			t.Fatalf("progress at %v", elapsed)
		}
	})
}

// Progress, interrupt and the concurrency limit, with a Tools that is not a Toolset (its
// calls start to run when the loop runs them).
func TestProgressInterruptConcurrency(t *testing.T) {
	for _, c := range []struct {
		name     string
		interval time.Duration
		calls    int
		parallel bool
		limit    int
		// the turn is interrupted after this long
		after        time.Duration
		wantProgress int
	}{
		{name: "progress every 10s", interval: 10 * time.Second, calls: 1, after: 35 * time.Second, wantProgress: 3},
		{name: "every 5s", interval: 5 * time.Second, calls: 1, after: 21 * time.Second, wantProgress: 4},
		{name: "never", interval: -1, calls: 1, after: time.Minute, wantProgress: 0},
		{name: "two at once of four", interval: 10 * time.Second, calls: 4, parallel: true, limit: 2, after: 15 * time.Second, wantProgress: 2},
		{name: "three at once of four", interval: 10 * time.Second, calls: 4, parallel: true, limit: 3, after: 15 * time.Second, wantProgress: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var running, most atomic.Int32
				tb := &toolbox{fn: map[string]func(context.Context, json.RawMessage) agent.Outcome{
					"hang": func(ctx context.Context, _ json.RawMessage) agent.Outcome {
						n := running.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						defer running.Add(-1)
						<-ctx.Done()
						return agent.Outcome{Output: "stopped", IsError: true}
					},
				}}
				var content []provider.Content
				for i := range c.calls {
					args := fmt.Sprintf(`{"n":%d}`, i) // distinct calls, not a loop
					if c.parallel {
						args = fmt.Sprintf(`{"n":%d,"_parallel":true}`, i)
					}
					content = append(content, call(fmt.Sprintf("c%d", i), "hang", args))
				}
				p := &scripted{t: t, replies: []provider.Message{reply(content...)}}
				var r recorder
				o := r.opts()
				o.ProgressInterval, o.MaxConcurrent = c.interval, c.limit
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(c.after, cancel)
				start := time.Now()
				res, err := agent.Run(ctx, p, tb, request("go"), o)
				if err != nil || res.End != agent.EndCancelled {
					t.Fatalf("end %s (%s) %v", res.End, res.Reason, err)
				}
				// Interrupt stops the calls at once: no time passes after it.
				if took := time.Since(start); took != c.after {
					t.Fatalf("the turn took %s after an interrupt at %s", took, c.after)
				}
				progress := 0
				for _, e := range r.events {
					if e.Type == agent.EventToolProgress {
						progress++
					}
				}
				if progress != c.wantProgress {
					t.Fatalf("%d progress events, want %d", progress, c.wantProgress)
				}
				if c.limit > 0 && int(most.Load()) != c.limit {
					t.Fatalf("%d calls ran at once, limit %d", most.Load(), c.limit)
				}
			})
		})
	}
}

// BenchmarkToolCallOverhead is the loop's cost per tool call (docs/BENCHMARKS.md): a reply of
// 100 calls of a tool that does nothing, then an answer; ns/call is the turn's time per call,
// the scripted model's replies included.
func BenchmarkToolCallOverhead(b *testing.B) {
	const calls = 100
	content := make([]provider.Content, calls)
	for i := range content {
		content[i] = call(fmt.Sprintf("c%d", i), "echo", fmt.Sprintf(`{"n":%d}`, i))
	}
	tb := &toolbox{fn: map[string]func(context.Context, json.RawMessage) agent.Outcome{
		"echo": func(context.Context, json.RawMessage) agent.Outcome { return agent.Outcome{Output: "ok"} },
	}}
	opts := agent.Options{MaxIterations: 2}
	b.ReportAllocs()
	for b.Loop() {
		p := &scripted{t: nil, replies: []provider.Message{reply(content...), reply(provider.Text("done"))}}
		res, err := agent.Run(b.Context(), p, tb, request("go"), opts)
		if err != nil || res.End != agent.EndCompleted {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls), "ns/call")
}
