package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

// testClock is a deterministic clock: each call is one millisecond later.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// lockedReader makes a deterministic random stream safe for Fork, which
// draws ids outside a Writer's lock.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}

// testOpts returns deterministic writer options (clock from 2026-05-01 09:00
// UTC, ids from a seeded ChaCha8); sync is off unless a test asks for it.
func testOpts(seed byte) WriterOptions {
	var s [32]byte
	s[0] = seed
	return WriterOptions{
		Sync: SyncNone,
		Now:  (&testClock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}).Now,
		Rand: &lockedReader{r: rand.NewChaCha8(s)},
	}
}

func jsonString(s string) string {
	b, err := encodeJSON(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func userMsg(text string) json.RawMessage {
	return json.RawMessage(`{"role":"user","content":[{"type":"text","text":` + jsonString(text) + `}],"timestamp":1777626000000}`)
}

type call struct{ id, name, args string }

func assistantMsg(text string, calls ...call) json.RawMessage {
	blocks := []string{`{"type":"text","text":` + jsonString(text) + `}`}
	for _, c := range calls {
		args := c.args
		if args == "" {
			args = `{}`
		}
		blocks = append(blocks, `{"type":"toolCall","id":`+jsonString(c.id)+`,"name":`+jsonString(c.name)+`,"arguments":`+args+`}`)
	}
	stop := "stop"
	if len(calls) > 0 {
		stop = "toolUse"
	}
	return json.RawMessage(`{"role":"assistant","content":[` + strings.Join(blocks, ",") + `],"api":"anthropic-messages","provider":"anthropic","model":"claude","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"` + stop + `","timestamp":1777626000001}`)
}

func toolResultMsg(callID, text string) json.RawMessage {
	return json.RawMessage(`{"role":"toolResult","toolCallId":` + jsonString(callID) + `,"toolName":"bash","content":[{"type":"text","text":` + jsonString(text) + `}],"isError":false,"timestamp":1777626000002}`)
}

// result carries a value and an error to ok, so one line can call and check.
type result[T any] struct {
	v   T
	err error
}

func try[T any](v T, err error) result[T] { return result[T]{v, err} }

func (r result[T]) ok(t testing.TB) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

func newWriter(t testing.TB, path string, opts WriterOptions) *Writer {
	t.Helper()
	w := try(Create(path, "/work/project", opts)).ok(t)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func openFile(t testing.TB, path string) *File {
	t.Helper()
	f := try(Open(path)).ok(t)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func fileLines(t testing.TB, path string) []string {
	t.Helper()
	b := try(os.ReadFile(path)).ok(t)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func buildCtx(t testing.TB, f *File, leaf string) *Context {
	t.Helper()
	return try(f.BuildContext(leaf)).ok(t)
}

// sameContext compares two contexts message by message (bytes).
func sameContext(t *testing.T, what string, got, want *Context) {
	t.Helper()
	if got.LeafID != want.LeafID || got.ThinkingLevel != want.ThinkingLevel || !reflect.DeepEqual(got.Model, want.Model) {
		t.Errorf("%s: leaf/model/thinking %q %+v %q, want %q %+v %q", what, got.LeafID, got.Model, got.ThinkingLevel, want.LeafID, want.Model, want.ThinkingLevel)
	}
	if len(got.Messages) != len(want.Messages) {
		t.Fatalf("%s: %d messages, want %d", what, len(got.Messages), len(want.Messages))
	}
	for i := range got.Messages {
		if !bytes.Equal(got.Messages[i], want.Messages[i]) {
			t.Errorf("%s: message %d\n got %s\nwant %s", what, i, got.Messages[i], want.Messages[i])
		}
	}
}

var entryPrefix = regexp.MustCompile(`^\{"type":"[a-z_]+","id":"[0-9a-f]{8}","parentId":(null|"[0-9a-f]{8}"),"timestamp":"2026-05-01T09:00:00\.\d{3}Z",`)

// TestWriterRoundTrip writes every entry type and reads the file back: same
// entries, same lines, same context, pi's line shape.
func TestWriterRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	opts := testOpts(1)
	opts.ParentSession = "/abs/parent.jsonl"
	w := newWriter(t, path, opts)

	mc := try(w.AppendModelChange("anthropic", "claude")).ok(t)
	try(w.AppendThinkingLevel("high")).ok(t)
	u1 := try(w.AppendMessage(userMsg("hello <b>&amp;</b> \u00e9"))).ok(t)
	try(w.AppendMessage(assistantMsg("let me look", call{"c1", "read", `{"path":"a.go"}`}))).ok(t)
	try(w.AppendMessage(toolResultMsg("c1", "package a"))).ok(t)
	a2 := try(w.AppendMessage(assistantMsg("done"))).ok(t)
	try(w.AppendCustom("ext.state", map[string]any{"n": 1})).ok(t)
	try(w.AppendCustomMessage("ext.note", "a note for the model", true, map[string]any{"k": "v"})).ok(t)
	try(w.AppendLabel(u1, "start")).ok(t)
	try(w.AppendSessionInfo("  my session  ")).ok(t)
	try(w.AppendMessage(userMsg("second"))).ok(t)
	try(w.AppendMessage(assistantMsg("second answer"))).ok(t)
	comp := try(w.AppendCompaction("earlier work", a2, 1234, CompactionDetails{ReadFiles: []string{"a.go"}, ModifiedFiles: []string{}}, false)).ok(t)
	try(w.AppendMessageExtra(userMsg("after compaction"), map[string]any{"nexus": map[string]any{"runId": "r1"}})).ok(t)
	try(w.Append("usage", map[string]any{"kind": "turn", "provider": "anthropic", "model": "claude", "usage": map[string]any{"input": 1}})).ok(t)
	bs := try(w.BranchWithSummary(mc, "tried something else", nil, false)).ok(t)
	try(w.AppendMessage(userMsg("on the new branch"))).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	fi := try(os.Lstat(path)).ok(t)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	lines := fileLines(t, path)
	wantHeader := `{"type":"session","version":3,"id":"` + w.Header().ID + `","timestamp":"2026-05-01T09:00:00.001Z","cwd":"/work/project","parentSession":"/abs/parent.jsonl"}`
	if lines[0] != wantHeader {
		t.Errorf("header\n got %s\nwant %s", lines[0], wantHeader)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(w.Header().ID) {
		t.Errorf("session id %q is not a UUID v7", w.Header().ID)
	}
	f := openFile(t, path)
	if len(f.Notes) != 0 {
		t.Errorf("notes: %v", f.Notes)
	}
	if len(f.Entries) != len(w.File().Entries) || len(lines) != len(f.Entries)+1 {
		t.Fatalf("%d entries read, %d written, %d lines", len(f.Entries), len(w.File().Entries), len(lines))
	}
	for i, e := range f.Entries {
		we := w.File().Entries[i]
		if e.ID != we.ID || e.ParentID != we.ParentID || e.Type != we.Type || e.Line != we.Line {
			t.Errorf("entry %d: read %s/%s/%s line %d, written %s/%s/%s line %d", i, e.Type, e.ID, e.ParentID, e.Line, we.Type, we.ID, we.ParentID, we.Line)
		}
		if raw := try(f.Raw(e)).ok(t); string(raw) != lines[i+1] || !bytes.Equal(raw, we.Raw) {
			t.Errorf("entry %d: raw differs from the line written", i)
		}
		if !entryPrefix.MatchString(lines[i+1]) {
			t.Errorf("line %d does not start with type, id, parentId, timestamp: %s", i+2, lines[i+1])
		}
		if strings.Contains(lines[i+1], `\u003c`) || strings.Contains(lines[i+1], `\u0026`) || strings.Contains(lines[i+1], ": ") {
			t.Errorf("line %d is HTML-escaped or not compact: %s", i+2, lines[i+1])
		}
	}
	if f.Entries[0].ParentID != "" || !strings.Contains(lines[1], `"parentId":null`) {
		t.Errorf("first entry's parentId is not null: %s", lines[1])
	}
	for i := 1; i < len(f.Entries); i++ {
		if f.Entries[i].ID == bs {
			if f.Entries[i].ParentID != mc || f.Entries[i].FromID() != mc {
				t.Errorf("branch summary parent %q fromId %q, want %q", f.Entries[i].ParentID, f.Entries[i].FromID(), mc)
			}
			continue
		}
		if f.Entries[i].ParentID != f.Entries[i-1].ID {
			t.Errorf("entry %d parent %q, want the previous entry %q", i, f.Entries[i].ParentID, f.Entries[i-1].ID)
		}
	}
	if got := f.Labels(); !reflect.DeepEqual(got, map[string]string{u1: "start"}) {
		t.Errorf("labels %v", got)
	}
	if f.SessionName() != "my session" {
		t.Errorf("session name %q", f.SessionName())
	}
	if f.Header.ParentSession != "/abs/parent.jsonl" || f.Header.Version != 3 {
		t.Errorf("header %+v", f.Header)
	}
	for _, leaf := range []string{"", comp, a2, bs} {
		sameContext(t, "leaf "+leaf, buildCtx(t, f, leaf), buildCtx(t, w.File(), leaf))
	}
	ctx := buildCtx(t, f, comp)
	if len(ctx.Messages) == 0 || !strings.Contains(string(ctx.Messages[0]), `"role":"compactionSummary"`) {
		t.Errorf("context at the compaction does not start with its summary: %s", ctx.Messages)
	}
	if ctx.Model == nil || ctx.Model.ModelID != "claude" || ctx.ThinkingLevel != "high" {
		t.Errorf("model %+v thinking %q", ctx.Model, ctx.ThinkingLevel)
	}
}

// TestLazyCreation: no file before the first message; held entries are
// written with it, after the header; the path is never overwritten.
func TestLazyCreation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(t *testing.T, dir, path string)
	}{
		{"closed before any message leaves no file", func(t *testing.T, _, path string) {
			w := newWriter(t, path, testOpts(2))
			try(w.AppendModelChange("p", "m")).ok(t)
			try(w.AppendSessionInfo("named")).ok(t)
			if w.Persisted() {
				t.Error("Persisted before the first message")
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("file exists before the first message: %v", err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("file exists after Close without a message: %v", err)
			}
		}},
		{"held entries are written with the first message", func(t *testing.T, _, path string) {
			w := newWriter(t, path, testOpts(3))
			mc := try(w.AppendModelChange("p", "m")).ok(t)
			tl := try(w.AppendThinkingLevel("low")).ok(t)
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatal("Flush created the file")
			}
			u := try(w.AppendMessage(userMsg("hi"))).ok(t)
			if !w.Persisted() {
				t.Error("not Persisted after the first message")
			}
			lines := fileLines(t, path)
			if len(lines) != 4 || !strings.HasPrefix(lines[0], `{"type":"session"`) {
				t.Fatalf("lines: %q", lines)
			}
			for i, id := range []string{mc, tl, u} {
				if !strings.Contains(lines[i+1], `"id":"`+id+`"`) {
					t.Errorf("line %d is not entry %s: %s", i+2, id, lines[i+1])
				}
			}
			if names, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*")); len(names) != 1 {
				t.Errorf("files after creation: %v", names)
			}
			if hidden, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(hidden) != 0 {
				t.Errorf("temporary files left: %v", hidden)
			}
		}},
		{"an existing path is refused by Create", func(t *testing.T, _, path string) {
			if err := os.WriteFile(path, []byte("keep me\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Create(path, "/", testOpts(4)); !errors.Is(err, fs.ErrExist) {
				t.Errorf("Create on an existing file: %v, want ErrExist", err)
			}
		}},
		{"a file created meanwhile is not overwritten (O_EXCL)", func(t *testing.T, _, path string) {
			w := newWriter(t, path, testOpts(5))
			try(w.AppendModelChange("p", "m")).ok(t)
			if err := os.WriteFile(path, []byte("someone else's\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := w.AppendMessage(userMsg("hi")); !errors.Is(err, fs.ErrExist) {
				t.Errorf("first message over an existing file: %v, want ErrExist", err)
			}
			if b := try(os.ReadFile(path)).ok(t); string(b) != "someone else's\n" {
				t.Errorf("file overwritten: %q", b)
			}
			if len(w.File().Entries) != 1 {
				t.Errorf("failed message indexed: %d entries", len(w.File().Entries))
			}
		}},
		{"a symlink at the path is refused", func(t *testing.T, dir, path string) {
			target := filepath.Join(dir, "target")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			if _, err := Create(path, "/", testOpts(6)); err == nil {
				t.Error("Create accepted a dangling symlink")
			}
			if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
				t.Error("the symlink target was created")
			}
		}},
		{"a symlink appearing before the first message is not followed", func(t *testing.T, dir, path string) {
			w := newWriter(t, path, testOpts(7))
			target := filepath.Join(dir, "target")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			if _, err := w.AppendMessage(userMsg("hi")); err == nil {
				t.Error("first message written through a symlink")
			}
			if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
				t.Error("the symlink target was created")
			}
		}},
		{"a missing directory is refused", func(t *testing.T, dir, _ string) {
			if _, err := Create(filepath.Join(dir, "nope", "s.jsonl"), "/", testOpts(8)); err == nil {
				t.Error("Create in a missing directory succeeded")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tc.run(t, dir, filepath.Join(dir, "s.jsonl"))
		})
	}
}

// writeSession writes a small linear session and returns the entry ids.
func writeSession(t testing.TB, path string, n int, seed byte) []string {
	t.Helper()
	w := try(Create(path, "/work/project", testOpts(seed))).ok(t)
	var ids []string
	for i := range n {
		msg := userMsg(fmt.Sprintf("question %d", i))
		if i%2 == 1 {
			msg = assistantMsg(fmt.Sprintf("answer %d", i))
		}
		ids = append(ids, try(w.AppendMessage(msg)).ok(t))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestOpenWriterContinues: the leaf is the last entry; Branch, ResetLeaf
// and unknown ids.
func TestOpenWriterContinues(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	ids := writeSession(t, path, 4, 9)
	w := try(OpenWriter(path, testOpts(10))).ok(t)
	defer func() { _ = w.Close() }()
	if w.LeafID() != ids[3] {
		t.Fatalf("leaf %q, want %q", w.LeafID(), ids[3])
	}
	next := try(w.AppendMessage(userMsg("continued"))).ok(t)
	if err := w.Branch(ids[1]); err != nil {
		t.Fatal(err)
	}
	side := try(w.AppendMessage(userMsg("side branch"))).ok(t)
	if err := w.Branch("nothere"); !errors.Is(err, ErrUnknownEntry) {
		t.Errorf("Branch(unknown): %v", err)
	}
	w.ResetLeaf()
	if c := try(w.Context()).ok(t); len(c.Messages) != 0 {
		t.Errorf("context after ResetLeaf has %d messages", len(c.Messages))
	}
	root := try(w.AppendMessage(userMsg("new root"))).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path)
	parents := map[string]string{next: ids[3], side: ids[1], root: ""}
	for id, want := range parents {
		if e := f.Entry(id); e == nil || e.ParentID != want {
			t.Errorf("entry %s: %+v, want parent %q", id, e, want)
		}
	}
	if got := len(f.Roots()); got != 2 {
		t.Errorf("%d roots, want 2", got)
	}
}

// TestTornLastLine: a crash in the middle of a write leaves a last line
// without newline; the next append starts on a fresh line.
func TestTornLastLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		tail string
		// complete: the tail is a whole entry missing only its newline.
		complete bool
	}{
		{"torn in the middle of the JSON", `{"type":"message","id":"deadbeef","parentId":null,"timestamp":"2026-05-01T09:00:00.000Z","message":{"role":"us`, false},
		{"torn inside a string with an escape", `{"type":"message","id":"deadbeef","parentId":null,"message":{"role":"user","content":"abc\`, false},
		{"a single byte", `{`, false},
		{"a whole entry without its newline", `{"type":"custom","id":"deadbeef","parentId":null,"timestamp":"2026-05-01T09:00:00.000Z","customType":"x"}`, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "s.jsonl")
			ids := writeSession(t, path, 3, byte(20+i))
			fh := try(os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)).ok(t)
			if _, err := fh.WriteString(tc.tail); err != nil {
				t.Fatal(err)
			}
			if err := fh.Close(); err != nil {
				t.Fatal(err)
			}
			w := try(OpenWriter(path, testOpts(byte(40+i)))).ok(t)
			wantParent := ids[2]
			if tc.complete {
				wantParent = "deadbeef"
			}
			if w.LeafID() != wantParent {
				t.Errorf("leaf %q, want %q", w.LeafID(), wantParent)
			}
			id := try(w.AppendMessage(userMsg("after the crash"))).ok(t)
			id2 := try(w.AppendMessage(assistantMsg("fine"))).ok(t)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			f := openFile(t, path)
			e := f.Entry(id)
			if e == nil || e.ParentID != wantParent {
				t.Fatalf("new entry %+v, want parent %q", e, wantParent)
			}
			if e2 := f.Entry(id2); e2 == nil || e2.ParentID != id {
				t.Errorf("second new entry %+v", e2)
			}
			if tc.complete {
				if len(f.Notes) != 0 {
					t.Errorf("notes %v", f.Notes)
				}
			} else if len(f.Notes) != 1 || !strings.Contains(f.Notes[0], "line 5") {
				t.Errorf("notes %v, want the torn line 5 skipped", f.Notes)
			}
			lines := fileLines(t, path)
			if lines[4] != tc.tail {
				t.Errorf("torn line changed: %q", lines[4])
			}
			if e.Line != 6 || f.Entry(id2).Line != 7 {
				t.Errorf("new entries on lines %d and %d, want 6 and 7", e.Line, f.Entry(id2).Line)
			}
			if len(lines) != 7 {
				t.Errorf("%d lines, want 7", len(lines))
			}
		})
	}
}

// TestCloseReleasesLockWhileForking: a closed Writer leaves the file unlocked even while other
// goroutines start processes. The flock belongs to the open file description, which a child
// shares between fork and exec; a Close that only closed the descriptor left the lock with the
// child, and the next OpenWriter failed with ErrLocked (most of the reopens below, before the fix).
func TestCloseReleasesLockWhileForking(t *testing.T) {
	t.Parallel()
	trueBin, err := exec.LookPath("true")
	if err != nil {
		testkit.SkipUnlessCI(t, "no true(1) to start: "+err.Error())
	}
	path := filepath.Join(t.TempDir(), "s.jsonl")
	writeSession(t, path, 3, 60)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				_ = exec.CommandContext(t.Context(), trueBin).Run()
			}
		})
	}
	defer wg.Wait()
	defer stop.Store(true)
	for i := range 300 {
		w, err := OpenWriter(path, testOpts(61))
		if err != nil {
			t.Fatalf("reopen %d after Close: %v", i, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenWriterRefuses: symlinks, other formats, older versions, a second
// writer.
func TestOpenWriterRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real := filepath.Join(dir, "real.jsonl")
	writeSession(t, real, 2, 50)
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	v1 := filepath.Join(dir, "v1.jsonl")
	if err := os.WriteFile(v1, []byte(`{"type":"session","id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}`+"\n"+
		`{"type":"message","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	harness := filepath.Join(dir, "harness.jsonl")
	if err := os.WriteFile(harness, []byte(`{"kind":"header","version":4}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		want       error
	}{
		{"symlink", link, nil},
		{"v1 needs migration", v1, ErrNeedsMigration},
		{"foreign format", harness, ErrForeignFormat},
		{"missing", filepath.Join(dir, "none.jsonl"), fs.ErrNotExist},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := OpenWriter(tc.path, testOpts(51))
			if err == nil {
				_ = w.Close()
				t.Fatal("OpenWriter succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("second writer", func(t *testing.T) {
		w := try(OpenWriter(real, testOpts(52))).ok(t)
		if _, err := OpenWriter(real, testOpts(53)); !errors.Is(err, ErrLocked) {
			t.Errorf("second OpenWriter: %v, want ErrLocked", err)
		}
		if _, err := CompactLines(real, 1, time.Now()); !errors.Is(err, ErrLocked) {
			t.Errorf("CompactLines under a writer: %v, want ErrLocked", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		w2 := try(OpenWriter(real, testOpts(54))).ok(t)
		if err := w2.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMigrateThenAppend: a v1 file is rewritten as v3 (archived original)
// with the same context, and can then be appended to.
func TestMigrateThenAppend(t *testing.T) {
	t.Parallel()
	src := piSample(t, largeV1)
	orig := try(os.ReadFile(src)).ok(t)
	path := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	before := openFile(t, src)
	now := time.Date(2026, 5, 1, 9, 30, 0, 123e6, time.UTC)
	archive := try(Migrate(path, now)).ok(t)
	if want := path + ".bak.2026-05-01T09-30-00.123Z"; archive != want {
		t.Errorf("archive %q, want %q", archive, want)
	}
	if b := try(os.ReadFile(archive)).ok(t); !bytes.Equal(b, orig) {
		t.Error("archive differs from the original")
	}
	if again := try(Migrate(path, now.Add(time.Second))).ok(t); again != "" {
		t.Errorf("second Migrate archived again: %q", again)
	}
	after := openFile(t, path)
	if after.Header.Version != 3 || after.Header.ID != before.Header.ID {
		t.Errorf("header %+v", after.Header)
	}
	sameContext(t, "migrated", buildCtx(t, after, ""), buildCtx(t, before, ""))
	w := try(OpenWriter(path, testOpts(55))).ok(t)
	id := try(w.AppendMessage(userMsg("continuing a migrated session"))).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path)
	if e := f.Entry(id); e == nil || e.ParentID != before.Leaf().ID {
		t.Errorf("appended entry %+v, want parent %q", e, before.Leaf().ID)
	}
}

// TestSyncPolicies: entries are synced per entry, per batch (and on Flush
// and Close) or never.
func TestSyncPolicies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		policy SyncPolicy
		batch  int
		// pending after each of 6 appends
		want []int
	}{
		{SyncEntry, 0, []int{0, 0, 0, 0, 0, 0}},
		{SyncBatch, 4, []int{0, 1, 2, 3, 0, 1}},
		{SyncNone, 0, []int{2, 3, 4, 5, 6, 7}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "s.jsonl")
			opts := testOpts(60)
			opts.Sync, opts.BatchSize = tc.policy, tc.batch
			w := newWriter(t, path, opts)
			try(w.AppendModelChange("p", "m")).ok(t) // held until the first message
			for i, want := range tc.want {
				try(w.AppendMessage(userMsg(fmt.Sprint(i)))).ok(t)
				w.mu.Lock()
				got := w.pending
				w.mu.Unlock()
				if got != want {
					t.Errorf("after append %d: %d entries unsynced, want %d", i, got, want)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if w.pending != 0 {
				t.Errorf("%d unsynced after Flush", w.pending)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got := len(openFile(t, path).Entries); got != 7 {
				t.Errorf("%d entries, want 7", got)
			}
			if err := w.Flush(); !errors.Is(err, ErrClosed) {
				t.Errorf("Flush after Close: %v", err)
			}
			if _, err := w.AppendMessage(userMsg("late")); !errors.Is(err, ErrClosed) {
				t.Errorf("append after Close: %v", err)
			}
		})
	}
}

// TestAppendValidation: invalid entries are refused and leave the file and
// the leaf alone.
func TestAppendValidation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	w := newWriter(t, path, testOpts(70))
	u := try(w.AppendMessage(userMsg("hi"))).ok(t)
	cases := []struct {
		name string
		do   func() (string, error)
	}{
		{"thinking level", func() (string, error) { return w.AppendThinkingLevel("extreme") }},
		{"label of an unknown entry", func() (string, error) { return w.AppendLabel("nothere", "x") }},
		{"branch summary from an unknown entry", func() (string, error) { return w.BranchWithSummary("nothere", "s", nil, false) }},
		{"message without role", func() (string, error) { return w.AppendMessage(map[string]any{"content": "x"}) }},
		{"message that is not an object", func() (string, error) { return w.AppendMessage("just text") }},
		{"invalid raw JSON", func() (string, error) { return w.AppendMessage(json.RawMessage(`{"role":`)) }},
		{"compaction summary as a message", func() (string, error) {
			return w.AppendMessage(map[string]any{"role": "compactionSummary", "summary": "x"})
		}},
		{"reserved field in Append", func() (string, error) { return w.Append("usage", map[string]any{"id": "x"}) }},
		{"session type in Append", func() (string, error) { return w.Append("session", nil) }},
		{"reserved extra field", func() (string, error) { return w.AppendMessageExtra(userMsg("x"), map[string]any{"parentId": "x"}) }},
		{"custom message content", func() (string, error) { return w.AppendCustomMessage("t", 42, true, nil) }},
		{"custom without type", func() (string, error) { return w.AppendCustom("", nil) }},
		{"compaction keeping an unknown entry", func() (string, error) { return w.AppendCompaction("s", "nothere", 1, nil, false) }},
		{"model change without model", func() (string, error) { return w.AppendModelChange("p", "") }},
		{"turn marker without response", func() (string, error) { return w.AppendTurnMarker(Turn{}) }},
		{"turn marker for an unknown entry", func() (string, error) { return w.AppendTurnMarker(Turn{ID: "nothere"}) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if id, err := tc.do(); err == nil {
				t.Errorf("accepted (id %s)", id)
			}
			if w.LeafID() != u {
				t.Errorf("leaf moved to %q", w.LeafID())
			}
		})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(fileLines(t, path)); got != 2 {
		t.Errorf("%d lines, want 2", got)
	}
}

// TestLabelsAndNames: clearing omits the label field; session names trim.
func TestLabelsAndNames(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	w := newWriter(t, path, testOpts(71))
	u := try(w.AppendMessage(userMsg("hi"))).ok(t)
	try(w.AppendLabel(u, "one")).ok(t)
	try(w.AppendLabel(u, "")).ok(t)
	try(w.AppendSessionInfo("name")).ok(t)
	try(w.AppendSessionInfo("   ")).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := fileLines(t, path)
	if strings.Contains(lines[3], `"label":`) || !strings.Contains(lines[3], `"targetId":"`+u+`"`) {
		t.Errorf("cleared label line: %s", lines[3])
	}
	if !strings.HasSuffix(lines[5], `"name":""}`) {
		t.Errorf("cleared name line: %s", lines[5])
	}
	f := openFile(t, path)
	if len(f.Labels()) != 0 || f.SessionName() != "" {
		t.Errorf("labels %v name %q", f.Labels(), f.SessionName())
	}
}

// TestEntryIDs: ids are 8 hex characters; a collision draws again; a broken
// random source is an error, not a duplicate.
func TestEntryIDs(t *testing.T) {
	t.Parallel()
	taken := map[string]bool{"00000001": true}
	seq := bytes.NewReader([]byte{0, 0, 0, 1, 0, 0, 0, 1, 0xab, 0xcd, 0xef, 0x12})
	id, err := newEntryID(seq, func(s string) bool { return taken[s] })
	if err != nil || id != "abcdef12" {
		t.Errorf("id %q, %v; want abcdef12 after two collisions", id, err)
	}
	zeros := bytes.NewReader(make([]byte, 1000))
	if _, err := newEntryID(zeros, func(string) bool { return true }); err == nil {
		t.Error("no error after 100 collisions")
	}
	if _, err := newEntryID(bytes.NewReader(nil), func(string) bool { return false }); err == nil {
		t.Error("no error from an empty random source")
	}
}

// TestConcurrentAppends: appends from many goroutines make one chain with
// unique ids (run with -race).
func TestConcurrentAppends(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	w := newWriter(t, path, testOpts(72))
	try(w.AppendMessage(userMsg("start"))).ok(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				if _, err := w.AppendMessage(userMsg(fmt.Sprintf("g%d-%d", g, i))); err != nil {
					t.Error(err)
					return
				}
				_ = w.LeafID()
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path)
	if len(f.Entries) != 321 {
		t.Fatalf("%d entries, want 321", len(f.Entries))
	}
	seen := map[string]bool{}
	for i, e := range f.Entries {
		if seen[e.ID] {
			t.Errorf("duplicate id %s", e.ID)
		}
		seen[e.ID] = true
		if i > 0 && e.ParentID != f.Entries[i-1].ID {
			t.Errorf("entry %d is not a child of the previous one", i)
		}
	}
}

// TestMessageExtraFields: extra top-level fields are kept and pi's context
// ignores them.
func TestMessageExtraFields(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	w := newWriter(t, path, testOpts(73))
	try(w.AppendMessage(userMsg("plain"))).ok(t)
	id := try(w.AppendMessageExtra(userMsg("with metadata"), map[string]any{
		"nexus": map[string]any{"tokenCount": map[string]int{"inputTokens": 3}, "toolCalls": []string{}},
	})).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path)
	raw := string(try(f.Raw(f.Entry(id))).ok(t))
	if !strings.HasSuffix(raw, `"timestamp":1777626000000},"nexus":{"tokenCount":{"inputTokens":3},"toolCalls":[]}}`) {
		t.Errorf("line %s", raw)
	}
	ctx := buildCtx(t, f, "")
	if len(ctx.Messages) != 2 || !bytes.Equal(ctx.Messages[1], userMsg("with metadata")) {
		t.Errorf("context %s", ctx.Messages)
	}
}

// TestWriterInteropPi: a file written by the Writer, with branches, labels,
// a compaction, a branch summary, a name and a fork, gives the same context
// in pi's SessionManager at every entry (skipped without node and
// tools/pi, like the other interoperability tests).
func TestWriterInteropPi(t *testing.T) {
	t.Parallel()
	piTool(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	w := newWriter(t, path, testOpts(74))
	try(w.AppendModelChange("anthropic", "claude")).ok(t)
	try(w.AppendThinkingLevel("medium")).ok(t)
	u1 := try(w.AppendMessage(userMsg("first <question> & \u2028 \U0001F600"))).ok(t)
	try(w.AppendMessage(assistantMsg("reading", call{"c1", "read", `{"path":"x.go"}`}))).ok(t)
	try(w.AppendMessage(toolResultMsg("c1", "package x"))).ok(t)
	a1 := try(w.AppendMessage(assistantMsg("first answer"))).ok(t)
	try(w.AppendLabel(u1, "start")).ok(t)
	try(w.AppendMessage(userMsg("second"))).ok(t)
	try(w.AppendMessage(assistantMsg("second answer"))).ok(t)
	try(Compact(w, "the summary", 1, nil)).ok(t)
	try(w.AppendMessage(userMsg("after compaction"))).ok(t)
	try(w.AppendCustom("ext", map[string]any{"a": 1})).ok(t)
	try(w.AppendCustomMessage("ext", []map[string]string{{"type": "text", "text": "injected"}}, false, nil)).ok(t)
	try(w.BranchWithSummary(a1, "abandoned the second question", nil, false)).ok(t)
	try(w.AppendMessage(userMsg("other way"))).ok(t)
	try(w.AppendSessionInfo("interop")).ok(t)
	turn := try(Turns(w.File(), w.LeafID())).ok(t)
	try(w.AppendTurnMarker(turn[0])).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fork := filepath.Join(dir, "fork.jsonl")
	fw := try(Fork(path, a1, fork, testOpts(75))).ok(t)
	try(fw.AppendMessage(userMsg("in the fork"))).ok(t)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	res := piContexts(t, []piRequest{{Path: path, Leaves: "all"}, {Path: fork, Leaves: "all"}})
	for i, p := range []string{path, fork} {
		if n := compareFile(t, p, res[i]); n == 0 {
			t.Errorf("%s: pi's contexts hold no message", p)
		}
	}
}

func benchmarkAppend(b *testing.B, policy SyncPolicy) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "s.jsonl")
	opts := WriterOptions{Sync: policy}
	w := try(Create(path, "/work/project", opts)).ok(b)
	defer func() { _ = w.Close() }()
	// A typical 1 KB message entry.
	msg := userMsg(strings.Repeat("lorem ipsum ", 75))
	line, err := encodeEntry("message", "01234567", "89abcdef", "2026-05-01T09:00:00.000Z", []entryField{{"message", msg}})
	if err != nil || len(line) < 1000 || len(line) > 1100 {
		b.Fatalf("entry of %d bytes: %v", len(line), err)
	}
	b.SetBytes(int64(len(line) + 1))
	b.ResetTimer()
	for b.Loop() {
		if _, err := w.AppendMessage(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkAppend measures appends of 1 KB message entries per sync policy.
func BenchmarkAppend(b *testing.B) {
	for _, p := range []struct {
		name   string
		policy SyncPolicy
	}{{"SyncEntry", SyncEntry}, {"SyncBatch", SyncBatch}, {"SyncNone", SyncNone}} {
		b.Run(p.name, func(b *testing.B) { benchmarkAppend(b, p.policy) })
	}
}

// BenchmarkOpenWriter measures continuing a 10 MB transcript (index, lock,
// line count).
func BenchmarkOpenWriter(b *testing.B) {
	path := filepath.Join(b.TempDir(), "s.jsonl")
	w := try(Create(path, "/work/project", WriterOptions{Sync: SyncNone})).ok(b)
	msg := userMsg(strings.Repeat("lorem ipsum ", 75))
	for range 10000 {
		try(w.AppendMessage(msg)).ok(b)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		w := try(OpenWriter(path, WriterOptions{Sync: SyncNone})).ok(b)
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
