package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

// These tests run the real pi coding agent (tools/pi, @mariozechner/pi-coding-agent
// pinned there) through tools/pi/context.mjs and write.mjs, and compare the context
// pi builds with BuildContext's. They need node and `npm ci --prefix tools/pi`.

const piToolDir = "../../tools/pi"

// piTool returns node's path and tools/pi's absolute path, skipping the test
// when either is missing, except under CI, where CI installs both and a
// missing one means the interoperability checks silently stopped running.
func piTool(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs(piToolDir)
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	node, err = exec.LookPath("node")
	if err != nil {
		missing = "node is not installed"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", "@mariozechner", "pi-coding-agent", "package.json")); err != nil {
		missing = "the pi coding agent is not installed (npm ci --prefix tools/pi)"
	}
	if missing != "" {
		testkit.SkipUnlessCI(t, "pi interoperability: "+missing)
	}
	return node, dir
}

// runNode runs a script of tools/pi with a scratch PI_CODING_AGENT_DIR, so pi
// never reads or writes the user's ~/.pi.
func runNode(t *testing.T, stdin []byte, script string, args ...string) []byte {
	t.Helper()
	node, dir := piTool(t)
	cmd := exec.CommandContext(t.Context(), node, append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Env = append(os.Environ(), "PI_CODING_AGENT_DIR="+t.TempDir())
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s %s: %v\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// piRequest is one file of a context.mjs --batch request. Leaves is "default",
// "tips" (entries without children), "all" (every entry) or a list of ids.
type piRequest struct {
	Path   string `json:"path"`
	Leaves any    `json:"leaves"`
}

// piContext is a context as context.mjs prints it (the shape of `nexus chat history`).
type piContext struct {
	LeafID        string            `json:"leafId"`
	Model         *Model            `json:"model"`
	ThinkingLevel string            `json:"thinkingLevel"`
	Messages      []json.RawMessage `json:"messages"`
}

type piResult struct {
	Path          string            `json:"path"`
	Error         string            `json:"error"`
	EntryIDs      []string          `json:"entryIds"`
	Labels        map[string]string `json:"labels"`
	SessionName   string            `json:"sessionName"`
	ParentSession string            `json:"parentSession"`
	// Contexts holds the default leaf's context first, then one per requested leaf.
	Contexts []piContext `json:"contexts"`
}

// piContexts builds contexts with pi's SessionManager, every file in one node process.
func piContexts(t *testing.T, reqs []piRequest) []piResult {
	t.Helper()
	in, err := json.Marshal(map[string]any{"files": reqs})
	if err != nil {
		t.Fatal(err)
	}
	out := runNode(t, in, "context.mjs", "--batch")
	var res []piResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("context.mjs --batch output: %v", err)
	}
	if len(res) != len(reqs) {
		t.Fatalf("context.mjs --batch: %d results for %d files", len(res), len(reqs))
	}
	for _, r := range res {
		if r.Error != "" {
			t.Fatalf("pi could not load %s: %s", r.Path, r.Error)
		}
	}
	return res
}

// idMap maps pi's entry ids to nexus's by position in the file. They are the
// same ids except in migrated v1 files, where pi draws random ids and nexus
// numbers the entries.
func idMap(t *testing.T, f *File, pi piResult) map[string]string {
	t.Helper()
	if len(pi.EntryIDs) != len(f.Entries) {
		t.Fatalf("pi has %d entries, nexus %d", len(pi.EntryIDs), len(f.Entries))
	}
	m := make(map[string]string, len(pi.EntryIDs))
	for i, id := range pi.EntryIDs {
		if f.Header.Version >= CurrentVersion && id != f.Entries[i].ID {
			t.Fatalf("entry %d: pi reads id %q, nexus %q", i, id, f.Entries[i].ID)
		}
		m[id] = f.Entries[i].ID
	}
	return m
}

// compareWithPi checks that nexus's context at pi's leaf equals pi's: same
// leaf, model and thinking level, and messages equal as JSON values (pi
// re-serializes what it parsed, nexus passes the line's bytes through, so
// only the values can be compared).
func compareWithPi(t *testing.T, f *File, ids map[string]string, want piContext) {
	t.Helper()
	leaf, ok := ids[want.LeafID]
	if !ok {
		t.Fatalf("pi's leaf %q is not an entry of the file", want.LeafID)
	}
	got, err := f.BuildContext(leaf)
	if err != nil {
		t.Fatalf("BuildContext(%q): %v", leaf, err)
	}
	where := fmt.Sprintf("leaf %s (pi %s)", leaf, want.LeafID)
	if got.LeafID != leaf {
		t.Errorf("%s: nexus leafId %q", where, got.LeafID)
	}
	if !reflect.DeepEqual(got.Model, want.Model) {
		t.Errorf("%s: model nexus %+v, pi %+v", where, got.Model, want.Model)
	}
	if got.ThinkingLevel != want.ThinkingLevel {
		t.Errorf("%s: thinking level nexus %q, pi %q", where, got.ThinkingLevel, want.ThinkingLevel)
	}
	if len(got.Messages) != len(want.Messages) {
		t.Errorf("%s: nexus has %d messages, pi %d", where, len(got.Messages), len(want.Messages))
	}
	for i := range min(len(got.Messages), len(want.Messages)) {
		g, w := jsonValue(t, got.Messages[i]), jsonValue(t, want.Messages[i])
		if m, ok := w.(map[string]any); ok && m["role"] == "branchSummary" {
			if from, ok := m["fromId"].(string); ok && ids[from] != "" {
				m["fromId"] = ids[from]
			}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: message %d differs\nnexus: %s\npi:    %s", where, i, clip(got.Messages[i]), clip(want.Messages[i]))
		}
	}
}

func jsonValue(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("message %s: %v", clip(raw), err)
	}
	return v
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "..."
	}
	return string(b)
}

// compareFile checks every context pi built for a file, plus its labels, name
// and parent session, and returns how many messages were compared.
func compareFile(t *testing.T, path string, pi piResult) int {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ids := idMap(t, f, pi)
	if len(pi.Contexts) == 0 {
		t.Fatal("pi built no context")
	}
	n := 0
	for _, c := range pi.Contexts {
		compareWithPi(t, f, ids, c)
		n += len(c.Messages)
	}
	labels := map[string]string{}
	for id, l := range pi.Labels {
		labels[ids[id]] = l
	}
	if got := f.Labels(); !reflect.DeepEqual(got, labels) {
		t.Errorf("labels: nexus %v, pi %v", got, labels)
	}
	if got := f.SessionName(); got != pi.SessionName {
		t.Errorf("session name: nexus %q, pi %q", got, pi.SessionName)
	}
	if f.Header.ParentSession != pi.ParentSession {
		t.Errorf("parent session: nexus %q, pi %q", f.Header.ParentSession, pi.ParentSession)
	}
	return n
}

// TestInteropPiSamples: every pi sample, at its default leaf and at
// every tip of its tree, gives the same context in pi and in nexus.
func TestInteropPiSamples(t *testing.T) {
	t.Parallel()
	files := piSamples(t)
	reqs := make([]piRequest, len(files))
	for i, p := range files {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = piRequest{Path: abs, Leaves: "tips"}
	}
	res := piContexts(t, reqs)
	for i, p := range files {
		t.Run(filepath.Base(p), func(t *testing.T) {
			if n := compareFile(t, p, res[i]); n == 0 {
				t.Error("pi's contexts hold no message")
			}
		})
	}
}

// TestInteropPiWritten: sessions written by pi's SessionManager (every entry
// type, branches, two roots, compactions, a fork and a copy) give the same
// context in nexus at every entry.
func TestInteropPiWritten(t *testing.T) {
	t.Parallel()
	out := runNode(t, nil, "write.mjs", t.TempDir(), "/work/interop")
	paths := strings.Fields(string(out))
	if len(paths) != 3 {
		t.Fatalf("write.mjs printed %q, want three paths", out)
	}
	reqs := make([]piRequest, len(paths))
	for i, p := range paths {
		reqs[i] = piRequest{Path: p, Leaves: "all"}
	}
	res := piContexts(t, reqs)
	for i, name := range []string{"session", "createBranchedSession", "forkFrom"} {
		t.Run(name, func(t *testing.T) {
			if n := compareFile(t, paths[i], res[i]); n == 0 {
				t.Error("pi's contexts hold no message")
			}
		})
	}
	for i, p := range res[1:] {
		if p.ParentSession != paths[0] {
			t.Errorf("file %d: parentSession %q, want %q", i+2, p.ParentSession, paths[0])
		}
	}
}

// TestInteropQuirks: hand-made files with the quirks docs/conversations.md says real
// files have give the same context in pi and in nexus at every entry.
// Self-parents and parent cycles are left out: pi's path walk never ends on them.
func TestInteropQuirks(t *testing.T) {
	t.Parallel()
	const (
		ts = `"timestamp":"2026-01-01T00:00:01.000Z"`
		v1 = `{"type":"session","id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}` + "\n"
	)
	user := func(id, parent, text string) string {
		return `{"type":"message","id":"` + id + `","parentId":` + parent + `,` + ts + `,"message":{"role":"user","content":"` + text + `","timestamp":1}}` + "\n"
	}
	cases := []struct {
		name, body string
		// pending names a known difference (reported); the case is skipped until it is fixed.
		pending string
	}{
		{"orphans and duplicate ids", v3head +
			user("u1", "null", "first") +
			user("u2", `"nowhere"`, "orphan") +
			user("u1", `"u2"`, "duplicate id, later wins") +
			`{"type":"message","id":"a1","parentId":"u1",` + ts + `,"message":{"role":"assistant","content":[{"type":"text","text":"ok"}],"provider":"p","model":"m","stopReason":"stop"}}` + "\n", ""},
		{"missing and empty fields", v3head +
			`{"type":"model_change","id":"m1","parentId":null,` + ts + `,"provider":"p"}` + "\n" +
			`{"type":"thinking_level_change","id":"t1","parentId":"m1",` + ts + `}` + "\n" +
			user("u1", `"t1"`, "hi") +
			`{"type":"message","id":"a1","parentId":"u1",` + ts + `,"message":{"role":"assistant","content":[],"stopReason":"aborted","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}}}` + "\n" +
			`{"type":"custom_message","id":"c1","parentId":"a1",` + ts + `,"customType":"x","content":"no display"}` + "\n" +
			`{"type":"branch_summary","id":"b1","parentId":"c1",` + ts + `,"fromId":"u1","summary":""}` + "\n" +
			`{"type":"compaction","id":"k1","parentId":"b1",` + ts + `,"summary":"no index, no tokens"}` + "\n" +
			user("u2", `"k1"`, "after"), ""},
		{"line quirks", v3head +
			strings.TrimSuffix(user("u1", "null", "crlf"), "\n") + "\r\n" +
			"\n   \n" +
			"not json at all\n" +
			`{"type":"weird_future","id":"w1","parentId":"u1",` + ts + `,"payload":{"a":"\u2028<b>&"},"n":1.50}` + "\n" +
			`{"type":"message","id":"a1","parentId":"w1",` + ts + `,"message":{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"bash","arguments":{},"partialJson":"{\"comm"}],"provider":"","model":"","extra":{"k":[1,2.50,"\u00e9"]}}}` + "\n" +
			`{"type":"message","id":"torn","parentId":"a1","message":{"ro`, ""},
		{"labels and names", v3head +
			user("u1", "null", "one") +
			`{"type":"label","id":"l1","parentId":"u1",` + ts + `,"targetId":"u1","label":"keep"}` + "\n" +
			`{"type":"session_info","id":"n1","parentId":"l1",` + ts + `,"name":"  spaced  "}` + "\n" +
			user("u2", `"n1"`, "two") +
			`{"type":"label","id":"l2","parentId":"u2",` + ts + `,"targetId":"u2","label":"gone"}` + "\n" +
			`{"type":"label","id":"l3","parentId":"l2",` + ts + `,"targetId":"u2","label":""}` + "\n" +
			`{"type":"session_info","id":"n2","parentId":"l3",` + ts + `,"name":""}` + "\n", ""},
		{"v2 hookMessage", `{"type":"session","version":2,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}` + "\n" +
			user("u1", "null", "hi") +
			`{"type":"message","id":"h1","parentId":"u1",` + ts + `,"message":{"role":"hookMessage","customType":"hook","content":"from a hook","display":true,"timestamp":2}}` + "\n", ""},
		{"version as a string", `{"type":"session","version":"2","id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}` + "\n" +
			user("u1", "null", "hi") +
			`{"type":"message","id":"h1","parentId":"u1",` + ts + `,"message":{"role":"hookMessage","customType":"hook","content":"x","display":false,"timestamp":2}}` + "\n", ""},
		{"v1 compaction index", v1 +
			`{"type":"message",` + ts + `,"message":{"role":"user","content":"one","timestamp":1}}` + "\n" +
			`{"type":"message",` + ts + `,"message":{"role":"assistant","content":[{"type":"text","text":"two"}],"provider":"p","model":"m"}}` + "\n" +
			`{"type":"message",` + ts + `,"message":{"role":"user","content":"three","timestamp":3}}` + "\n" +
			`{"type":"compaction",` + ts + `,"summary":"sum","firstKeptEntryIndex":2,"tokensBefore":10}` + "\n" +
			`{"type":"message",` + ts + `,"message":{"role":"user","content":"four","timestamp":4}}` + "\n", ""},
		{"v1 compaction index after a malformed line", v1 +
			`{"type":"message",` + ts + `,"message":{"role":"user","content":"one","timestamp":1}}` + "\n" +
			"{broken\n" +
			`{"type":"message",` + ts + `,"message":{"role":"user","content":"two","timestamp":2}}` + "\n" +
			`{"type":"message",` + ts + `,"message":{"role":"user","content":"three","timestamp":3}}` + "\n" +
			`{"type":"compaction",` + ts + `,"summary":"sum","firstKeptEntryIndex":2}` + "\n", ""},
		{"branch summary without fromId", v3head +
			user("u1", "null", "hi") +
			`{"type":"branch_summary","id":"b1","parentId":"u1",` + ts + `,"summary":"no fromId"}` + "\n", ""},
		{"second session header", v3head +
			user("u1", "null", "hi") +
			`{"type":"session","version":3,"id":"s2","timestamp":"2026-01-01T00:00:02.000Z","cwd":"/x"}` + "\n", ""},
	}
	dir := t.TempDir()
	reqs := make([]piRequest, len(cases))
	for i, tc := range cases {
		p := filepath.Join(dir, fmt.Sprintf("quirk-%d.jsonl", i))
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		reqs[i] = piRequest{Path: p, Leaves: "all"}
	}
	res := piContexts(t, reqs)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pending != "" {
				t.Skipf("known difference from pi, reported: %s", tc.pending)
			}
			compareFile(t, reqs[i].Path, res[i])
		})
	}
}

// interopOpts makes a nexus writer deterministic: a clock that ticks a second
// per reading and a seeded random source for ids.
func interopOpts(seed byte) WriterOptions {
	clock := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	return WriterOptions{
		Sync: SyncNone,
		Now: func() time.Time {
			clock = clock.Add(time.Second)
			return clock
		},
		Rand: rand.NewChaCha8([32]byte{seed}),
	}
}

// wrote carries a writer call's results until the test checks them.
type wrote[T any] struct {
	v   T
	err error
}

func written[T any](v T, err error) wrote[T] { return wrote[T]{v, err} }

// ok fails the test on the call's error and returns its value.
func (w wrote[T]) ok(t *testing.T) T {
	t.Helper()
	if w.err != nil {
		t.Fatal(w.err)
	}
	return w.v
}

// TestInteropNexusWritten: sessions written by nexus's Writer (every entry
// type it writes, branches, a second root, compactions, extra fields, labels
// set and cleared) and its forks (of a branch, and of pi's own v1 sample)
// open in pi, which builds the same context at every entry.
func TestInteropNexusWritten(t *testing.T) {
	t.Parallel()
	piTool(t)
	dir := t.TempDir()
	mainPath := filepath.Join(dir, "main.jsonl")
	w := written(Create(mainPath, "/work/interop", interopOpts(1))).ok(t)
	defer func() { _ = w.Close() }()
	msg := func(s string) json.RawMessage { return json.RawMessage(s) }
	assistant := func(content, provider, model, stop string) json.RawMessage {
		return msg(`{"role":"assistant","content":` + content + `,"api":"anthropic-messages","provider":"` + provider + `","model":"` + model +
			`","usage":{"input":120,"output":30,"cacheRead":0,"cacheWrite":0,"totalTokens":150,"cost":{"input":0.00012,"output":0.00003,"cacheRead":0,"cacheWrite":0,"total":0.00015}},"stopReason":"` + stop + `","timestamp":1777626002000}`)
	}
	written(w.AppendModelChange("anthropic", "claude-sonnet-4-5")).ok(t)
	written(w.AppendThinkingLevel("medium")).ok(t)
	written(w.AppendSessionInfo("  interop: first name  ")).ok(t)
	// Characters Go and JavaScript encode differently (<>& and U+2028).
	u1 := written(w.AppendMessage(msg(`{"role":"user","content":"Find the bug <a href=\"x\"> & \u2028 été 🚀","timestamp":1777626001000}`))).ok(t)
	written(w.AppendMessage(assistant(`[{"type":"thinking","thinking":"Read it first.","thinkingSignature":"c2ln"},{"type":"text","text":"Reading."},{"type":"toolCall","id":"call_1","name":"read","arguments":{"path":"parse.go"}}]`, "anthropic", "claude-sonnet-4-5", "toolUse"))).ok(t)
	written(w.AppendMessage(msg(`{"role":"toolResult","toolCallId":"call_1","toolName":"read","content":[{"type":"text","text":"package main\n"}],"details":{"lines":1},"isError":false,"timestamp":1777626003000}`))).ok(t)
	a2 := written(w.AppendMessageExtra(assistant(`[{"type":"text","text":"Off by one."}]`, "anthropic", "claude-sonnet-4-5", "stop"),
		map[string]any{"nexus": map[string]any{"turnId": "t1", "tokenCount": 150}})).ok(t)
	written(w.AppendLabel(u1, "start")).ok(t)
	written(w.AppendLabel(a2, "diagnosis")).ok(t)
	written(w.AppendCustom("nexus.turn", map[string]any{"turn": 1})).ok(t)
	written(w.AppendCustomMessage("reminder", "Run the tests.", true, map[string]any{"source": "hook"})).ok(t)
	u2 := written(w.AppendMessage(msg(`{"role":"user","content":[{"type":"text","text":"A screenshot."},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"timestamp":1777626004000}`))).ok(t)
	written(w.AppendMessage(msg(`{"role":"bashExecution","command":"go test ./...","output":"ok\n","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1777626005000}`))).ok(t)
	written(w.AppendMessage(assistant(`[{"type":"text","text":"Tests pass."}]`, "openai", "gpt-5", "stop"))).ok(t)
	written(w.Append("usage", map[string]any{"kind": "turn", "provider": "openai", "model": "gpt-5", "usage": map[string]any{"input": 1, "output": 2}})).ok(t)
	written(w.AppendModelChange("openai", "gpt-5.1")).ok(t)
	u3 := written(w.AppendMessage(msg(`{"role":"user","content":"Now the writer.","timestamp":1777626006000}`))).ok(t)
	written(w.AppendMessage(assistant(`[{"type":"toolCall","id":"call_2","name":"edit","arguments":{"path":"w.go"}}]`, "openai", "gpt-5.1", "toolUse"))).ok(t)
	written(w.AppendMessage(msg(`{"role":"toolResult","toolCallId":"call_2","toolName":"edit","content":[{"type":"text","text":"no match"}],"isError":true,"timestamp":1777626007000}`))).ok(t)
	written(w.AppendCompaction("Fixed parse.go; <writer> & co pending.", u3, 23456, map[string]any{"readFiles": []string{"parse.go"}, "modifiedFiles": []string{}}, false)).ok(t)
	written(w.AppendMessage(msg(`{"role":"user","content":"After the compaction.","timestamp":1777626008000}`))).ok(t)
	a6 := written(w.AppendMessage(assistant(`[{"type":"text","text":"Continuing."}]`, "openai", "gpt-5.1", "stop"))).ok(t)
	written(w.AppendLabel(u1, "")).ok(t)
	written(w.AppendCustomMessage("status", []map[string]string{{"type": "text", "text": "hidden"}}, false, nil)).ok(t)
	if err := w.Branch(a2); err != nil {
		t.Fatal(err)
	}
	written(w.AppendThinkingLevel("high")).ok(t)
	written(w.AppendMessage(msg(`{"role":"user","content":"Another way.","timestamp":1777626009000}`))).ok(t)
	written(w.AppendMessage(assistant(`[]`, "anthropic", "claude-sonnet-4-5", "aborted"))).ok(t)
	written(w.BranchWithSummary(u2, "Approach B needs a <new> parser.", map[string]any{"readFiles": []string{"b.go"}}, false)).ok(t)
	kept := written(w.AppendMessage(msg(`{"role":"user","content":"Back on A.","timestamp":1777626010000}`))).ok(t)
	written(w.AppendMessage(assistant(`[{"type":"text","text":"On A."}]`, "anthropic", "claude-sonnet-4-5", "stop"))).ok(t)
	written(w.AppendCompaction("Approach A only.", kept, 9999, nil, true)).ok(t)
	written(w.AppendMessage(msg(`{"role":"user","content":"After the second compaction.","timestamp":1777626011000}`))).ok(t)
	written(w.BranchWithSummary("", "Started over.", nil, false)).ok(t)
	written(w.AppendMessage(msg(`{"role":"user","content":"Fresh start.","timestamp":1777626012000}`))).ok(t)
	written(w.AppendMessage(assistant(`[{"type":"text","text":"Hello again."}]`, "", "", "stop"))).ok(t)
	written(w.AppendSessionInfo("interop session")).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// A fork of the compacted branch, whose path has labels in the middle,
	// continued; and a fork of pi's own v1 sample (migrated on the way).
	forkPath := filepath.Join(dir, "fork.jsonl")
	fw := written(Fork(mainPath, a6, forkPath, interopOpts(2))).ok(t)
	written(fw.AppendMessage(msg(`{"role":"user","content":"In the fork.","timestamp":1777626013000}`))).ok(t)
	written(fw.AppendMessage(assistant(`[{"type":"text","text":"Fork reply."}]`, "anthropic", "claude-sonnet-4-5", "stop"))).ok(t)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	reqs := []piRequest{{Path: mainPath, Leaves: "all"}, {Path: forkPath, Leaves: "all"}}
	names := []string{"session", "fork"}
	v1Fork := filepath.Join(dir, "v1-fork.jsonl")
	vw := written(Fork(piSample(t, largeV1), "", v1Fork, interopOpts(3))).ok(t)
	written(vw.AppendMessage(msg(`{"role":"user","content":"Continuing a pi session in nexus.","timestamp":1777626014000}`))).ok(t)
	if err := vw.Close(); err != nil {
		t.Fatal(err)
	}
	reqs = append(reqs, piRequest{Path: v1Fork, Leaves: "tips"})
	names = append(names, "fork of pi's v1 sample")

	res := piContexts(t, reqs)
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			if n := compareFile(t, reqs[i].Path, res[i]); n == 0 {
				t.Error("pi's contexts hold no message")
			}
		})
	}
	if res[1].ParentSession != mainPath {
		t.Errorf("fork: pi reads parentSession %q, want %q", res[1].ParentSession, mainPath)
	}
	if got := res[0].SessionName; got != "interop session" {
		t.Errorf("pi reads session name %q", got)
	}
	if got := res[0].Labels; !reflect.DeepEqual(got, map[string]string{a2: "diagnosis"}) {
		t.Errorf("pi reads labels %v", got)
	}
}
