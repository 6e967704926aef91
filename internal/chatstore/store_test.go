package chatstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// upstreamStore is a sessions.json as OpenClaw writes it (JSON.stringify(store, null, 2)),
// with members nexus does not model, odd spacing inside values, HTML characters, U+2028,
// floats and a number too big for float64.
const upstreamStore = `{
  "agent:main:main": {
    "sessionId": "abc123",
    "updatedAt": 1705838400000,
    "systemSent": true,
    "skillsSnapshot": {
      "prompt": "<skills> & \u2028 stuff",
      "skills": [ {"name":"a"} ,{"name":"b"}]
    },
    "origin": {
      "provider": "telegram",
      "surface": "dm",
      "threadId": 42,
      "extraOriginField": "kept"
    },
    "weird":   1.50e3,
    "huge": 123456789012345678901234567890,
    "text": "caf\u00e9 → ünïcode <b>",
    "inputTokens": 50000
  },
  "agent:main:telegram:group:-123": {
    "sessionId": "def456",
    "updatedAt": 1705838500000,
    "chatType": "group",
    "lastTo": "telegram:-123"
  }
}
`

func TestUnknownFieldsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	writeFile(t, path, upstreamStore)
	var before map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(upstreamStore), &before); err != nil {
		t.Fatal(err)
	}
	c := newClock(t0)
	s := openTest(t, dir, c)

	e, err := s.Get("agent:main:main")
	if err != nil {
		t.Fatal(err)
	}
	if e.Origin == nil || e.Origin.Provider != "telegram" || e.Origin.ThreadID != "42" || e.InputTokens != 50000 {
		t.Errorf("typed view = %+v origin %+v", e, e.Origin)
	}
	for _, k := range []string{"systemSent", "skillsSnapshot", "weird", "huge", "text"} {
		if !bytes.Equal(e.Extra[k], before["agent:main:main"][k]) {
			t.Errorf("Extra[%s] = %s, want %s", k, e.Extra[k], before["agent:main:main"][k])
		}
	}

	if _, err := s.Patch(context.Background(), "agent:main:main", map[string]any{"model": "claude", "origin": map[string]any{"from": "u1"}}); err != nil {
		t.Fatal(err)
	}
	after := readStore(t, path)
	for key, members := range before {
		for k, v := range members {
			switch {
			case key == "agent:main:main" && (k == "updatedAt" || k == "origin"):
				continue
			}
			if !bytes.Equal(after[key][k], v) {
				t.Errorf("%s.%s = %s, want the bytes %s", key, k, after[key][k], v)
			}
		}
	}
	var origin map[string]json.RawMessage
	if err := json.Unmarshal(after["agent:main:main"]["origin"], &origin); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"provider": `"telegram"`, "surface": `"dm"`, "threadId": `42`, "extraOriginField": `"kept"`, "from": `"u1"`}
	for k, v := range want {
		if string(origin[k]) != v {
			t.Errorf("origin.%s = %s, want %s", k, origin[k], v)
		}
	}
	if got := string(after["agent:main:main"]["updatedAt"]); got != "1777626000000" {
		t.Errorf("updatedAt = %s, want the injected clock", got)
	}
	// the untouched entry is byte-identical as a whole
	if !strings.Contains(readFile(t, path), `"lastTo": "telegram:-123"`) {
		t.Errorf("layout changed:\n%s", readFile(t, path))
	}
}

func TestMergePatchRFC7386(t *testing.T) {
	// RFC 7386 appendix A.
	tests := []struct{ target, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`["a","b"]`, `["c","d"]`, `["c","d"]`},
		{`{"a":"b"}`, `["c"]`, `["c"]`},
		{`{"a":"foo"}`, `null`, ``},
		{`{"a":"foo"}`, `"bar"`, `"bar"`},
		{`{"e":null}`, `{"a":1}`, `{"a":1,"e":null}`},
		{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.target+"+"+tc.patch, func(t *testing.T) {
			got, keep, err := mergePatch(json.RawMessage(tc.target), json.RawMessage(tc.patch))
			if err != nil {
				t.Fatal(err)
			}
			if !keep {
				got = nil
			}
			if string(got) != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPatchSemantics(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newClock(t0))
	if _, err := s.Create(ctx, "agent:main:main", map[string]any{
		"origin":      map[string]any{"provider": "telegram", "surface": "dm", "accountId": "a1"},
		"queueMode":   "collect",
		"inputTokens": 10,
		"custom":      map[string]any{"x": 1, "y": []int{1, 2}},
	}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		patch string
		want  map[string]string // member -> JSON ("" = absent)
	}{
		{"scalar replaced", `{"inputTokens":20}`, map[string]string{"inputTokens": `20`, "queueMode": `"collect"`}},
		{"null deletes", `{"queueMode":null}`, map[string]string{"queueMode": ``, "inputTokens": `20`}},
		{"nested object merges", `{"origin":{"from":"u1","accountId":null}}`, map[string]string{"origin": `{"from":"u1","provider":"telegram","surface":"dm"}`}},
		{"unknown object merges, arrays replace", `{"custom":{"y":[3],"z":"<&>"}}`, map[string]string{"custom": `{"x":1,"y":[3],"z":"<&>"}`}},
		{"object replaced by scalar", `{"custom":5}`, map[string]string{"custom": `5`}},
		{"empty patch touches updatedAt only", `{}`, map[string]string{"inputTokens": `20`}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if _, err := s.Patch(ctx, "agent:main:main", json.RawMessage(st.patch)); err != nil {
				t.Fatal(err)
			}
			got := readStore(t, s.Path())["agent:main:main"]
			for k, want := range st.want {
				if string(got[k]) != want {
					t.Errorf("%s = %s, want %s", k, got[k], want)
				}
			}
		})
	}
}

func TestPatchErrors(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newClock(t0))
	for _, k := range []string{"agent:main:main", "agent:main:dm:bob"} {
		if _, err := s.Create(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Patch(ctx, "agent:main:main", map[string]any{"label": "home"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		key   string
		patch any
		want  error
	}{
		{"missing entry", "agent:main:dm:carol", map[string]any{"model": "m"}, ErrNotFound},
		{"bad key", "nope", map[string]any{"model": "m"}, ErrKey},
		{"not an object", "agent:main:main", json.RawMessage(`[1]`), ErrInvalid},
		{"not JSON", "agent:main:main", []byte(`{`), ErrInvalid},
		{"wrong type", "agent:main:main", map[string]any{"inputTokens": "many"}, ErrInvalid},
		{"fraction", "agent:main:main", map[string]any{"updatedAt": 1, "compactionCount": 1.5}, ErrInvalid},
		{"bad enum", "agent:main:main", map[string]any{"chatType": "dm"}, ErrInvalid},
		{"bad thinking level", "agent:main:main", map[string]any{"thinkingLevel": "extreme"}, ErrInvalid},
		{"origin not an object", "agent:main:main", map[string]any{"origin": "telegram"}, ErrInvalid},
		{"delete sessionId", "agent:main:main", map[string]any{"sessionId": nil}, ErrInvalid},
		{"label conflict", "agent:main:dm:bob", map[string]any{"label": "home"}, ErrLabelConflict},
		{"pinned too large", "agent:main:main", map[string]any{"displayName": strings.Repeat("x", MaxInlineValue+1)}, ErrTooLarge},
	}
	before := readFile(t, s.Path())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Patch(ctx, tc.key, tc.patch)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if after := readFile(t, s.Path()); after != before {
		t.Errorf("failed patches changed the file:\n%s", after)
	}
	// a label can move once its holder lets it go
	if _, err := s.Patch(ctx, "agent:main:main", map[string]any{"label": nil}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Patch(ctx, "agent:main:dm:bob", map[string]any{"label": "home"}); err != nil {
		t.Fatal(err)
	}
}

func TestCreateListLookup(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	dir := t.TempDir()
	s := openTest(t, dir, c)
	keys := []string{"agent:main:main", "agent:main:telegram:group:-123", "agent:ops:discord:channel:456", "AGENT:Main:DM:Bob"}
	for i, k := range keys {
		c.Advance(time.Minute)
		if _, err := s.Create(ctx, k, map[string]any{"displayName": "n" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, "agent:main:main", nil); !errors.Is(err, ErrExists) {
		t.Errorf("second create: %v, want ErrExists", err)
	}
	e, err := s.Get("agent:main:dm:bob")
	if err != nil {
		t.Fatal(err)
	}
	if e.SessionID != "sess-0004" || e.SessionFile != filepath.Join(dir, "sess-0004.jsonl") || e.ChatType != "direct" ||
		e.SessionStartedAt != t0.Add(4*time.Minute).UnixMilli() || e.UpdatedAt != e.SessionStartedAt {
		t.Errorf("created entry = %+v", e)
	}
	c.Advance(time.Minute)
	if _, err := s.Patch(ctx, "agent:main:main", map[string]any{"label": "Home"}); err != nil { // now the newest
		t.Fatal(err)
	}
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"all, newest first", Filter{}, []string{"agent:main:main", "agent:main:dm:bob", "agent:ops:discord:channel:456", "agent:main:telegram:group:-123"}},
		{"agent", Filter{Agent: "OPS"}, []string{"agent:ops:discord:channel:456"}},
		{"kinds", Filter{Kinds: []KeyKind{KindGroup, KindChannel}}, []string{"agent:ops:discord:channel:456", "agent:main:telegram:group:-123"}},
		{"channel", Filter{Channel: "telegram"}, []string{"agent:main:telegram:group:-123"}},
		{"since", Filter{Since: t0.Add(3 * time.Minute)}, []string{"agent:main:main", "agent:main:dm:bob", "agent:ops:discord:channel:456"}},
		{"search label", Filter{Search: "home"}, []string{"agent:main:main"}},
		{"limit", Filter{Limit: 2}, []string{"agent:main:main", "agent:main:dm:bob"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, err := s.List(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.Key)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, ref := range []string{"agent:main:main", "sess-0001", "Home"} {
		k, _, err := s.Lookup(ref)
		if err != nil || k != "agent:main:main" {
			t.Errorf("Lookup(%q) = %q, %v", ref, k, err)
		}
	}
	if _, _, err := s.Lookup("nothing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup(nothing) = %v", err)
	}
	// an imported transcript keeps its id, and the path follows it
	imp, err := s.Create(ctx, "agent:main:cron:import", map[string]any{"sessionId": "imported-1"})
	if err != nil || imp.SessionID != "imported-1" || imp.SessionFile != filepath.Join(dir, "imported-1.jsonl") {
		t.Errorf("import = %+v, %v", imp, err)
	}
}

func TestLegacyKeyStaysReachable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, FileName), `{"cron:nightly":{"sessionId":"x","updatedAt":1},"global":{"sessionId":"g","updatedAt":2}}`)
	s := openTest(t, dir, newClock(t0))
	for _, k := range []string{"cron:nightly", "global"} {
		if _, err := s.Patch(context.Background(), k, map[string]any{"model": "m"}); err != nil {
			t.Errorf("patch %s: %v", k, err)
		}
	}
	m := readStore(t, s.Path())
	if len(m) != 2 || string(m["cron:nightly"]["model"]) != `"m"` {
		t.Errorf("store = %v", m)
	}
}

func TestBlobRelocation(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, newClock(t0))
	if _, err := s.Create(ctx, "agent:main:main", nil); err != nil {
		t.Fatal(err)
	}
	big := map[string]any{"prompt": strings.Repeat("p", MaxInlineValue), "n": 1}
	e, err := s.Patch(ctx, "agent:main:main", map[string]any{"systemPromptReport": big, "taskDescription": strings.Repeat("t", MaxInlineValue+10)})
	if err != nil {
		t.Fatal(err)
	}
	ref, ok := e.Blobs["systemPromptReport"]
	if !ok || e.Blobs["taskDescription"].Path == "" || e.TaskDescription != "" {
		t.Fatalf("not relocated: blobs %v", e.Blobs)
	}
	if fi, err := os.Stat(s.Path()); err != nil || fi.Size() > 4096 {
		t.Errorf("index size %v (%v), want small", fi.Size(), err)
	}
	blobPath := filepath.Join(dir, filepath.FromSlash(ref.Path))
	if fi, err := os.Stat(blobPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("blob file: %v %v", fi, err)
	}
	data, err := s.ReadBlob(ref)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil || got["n"] != 1.0 {
		t.Errorf("blob content: %v %v", got["n"], err)
	}
	// a merge patch merges into the relocated value
	e, err = s.Patch(ctx, "agent:main:main", map[string]any{"systemPromptReport": map[string]any{"n": 2}})
	if err != nil {
		t.Fatal(err)
	}
	data, err = s.ReadBlob(e.Blobs["systemPromptReport"])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil || got["n"] != 2.0 || len(got["prompt"].(string)) != MaxInlineValue {
		t.Errorf("merged blob: n=%v err=%v", got["n"], err)
	}
	if _, err := os.Stat(blobPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("replaced blob still there: %v", err)
	}
	// shrinking it brings it back inline and drops the blob
	e, err = s.Patch(ctx, "agent:main:main", map[string]any{"systemPromptReport": "small"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Blobs["systemPromptReport"]; ok || string(e.Extra["systemPromptReport"]) != `"small"` {
		t.Errorf("not inline again: %v %s", e.Blobs, e.Extra["systemPromptReport"])
	}
	left, _ := filepath.Glob(filepath.Join(dir, "blobs", "*systemPromptReport*"))
	if len(left) != 0 {
		t.Errorf("blobs left: %v", left)
	}
}

func TestCorruptFileIsNeverOverwritten(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, newClock(t0))
	for _, k := range []string{"agent:main:main", "agent:main:dm:a"} {
		if _, err := s.Create(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	garbage := `{"agent:main:main": {"sessionId": "x", "upd` // torn
	writeFile(t, s.Path(), garbage)

	if _, err := s.Get("agent:main:main"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), s.Path()) {
		t.Errorf("Get: %v, want ErrCorrupt naming the file", err)
	}
	if _, err := s.Patch(ctx, "agent:main:main", map[string]any{"model": "m"}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Patch: %v, want ErrCorrupt", err)
	}
	if _, _, err := s.Resolve(ctx, "agent:main:main"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Resolve: %v, want ErrCorrupt", err)
	}
	if got := readFile(t, s.Path()); got != garbage {
		t.Fatalf("the damaged file was rewritten: %q", got)
	}
	rep, err := s.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// .bak is the version before the last write: one entry
	if !rep.Damaged || rep.From != "bak" || rep.Entries != 1 || readFile(t, rep.Archived) != garbage {
		t.Errorf("recover = %+v", rep)
	}
	if _, err := s.Get("agent:main:main"); err != nil {
		t.Errorf("after recover: %v", err)
	}
	if rep, err := s.Recover(ctx); err != nil || rep.Damaged {
		t.Errorf("recover of a good file = %+v, %v", rep, err)
	}
}

func TestDeleteArchivesTranscript(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	s := openTest(t, t.TempDir(), c)
	e, err := s.Create(ctx, "agent:main:main", nil)
	if err != nil {
		t.Fatal(err)
	}
	content := "{\"type\":\"session\",\"version\":3,\"id\":\"x\"}\n"
	writeFile(t, e.SessionFile, content)
	archived, err := s.Delete(ctx, "agent:main:main")
	if err != nil {
		t.Fatal(err)
	}
	if want := e.SessionFile + ".deleted.2026-05-01T09-00-00.000Z"; archived != want {
		t.Errorf("archived to %s, want %s", archived, want)
	}
	if readFile(t, archived) != content {
		t.Error("archive content differs")
	}
	if _, err := os.Stat(e.SessionFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("transcript still at its path: %v", err)
	}
	if _, err := s.Get("agent:main:main"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after delete: %v", err)
	}
	if _, err := s.Delete(ctx, "agent:main:main"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

func TestPermissionsAndSymlinks(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "state", "sessions")
	s := openTest(t, dir, newClock(t0))
	if _, err := s.Create(ctx, "agent:main:main", nil); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, s.Path(): 0o600, s.Path() + ".lock": 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	// a symlink planted at sessions.json is refused on read and never written through
	victim := filepath.Join(base, "victim")
	writeFile(t, victim, `{"agent:x:main":{"sessionId":"v","updatedAt":1}}`)
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, s.Path()); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, newClock(t0))
	if _, err := s2.Get("agent:x:main"); err == nil {
		t.Error("read through a symlink")
	}
	if _, err := s2.Create(ctx, "agent:main:dm:z", nil); err == nil {
		t.Error("write through a symlink")
	}
	if got := readFile(t, victim); got != `{"agent:x:main":{"sessionId":"v","updatedAt":1}}` {
		t.Errorf("victim changed: %s", got)
	}
}

func TestCancelledContext(t *testing.T) {
	s := openTest(t, t.TempDir(), newClock(t0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Create(ctx, "agent:main:main", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file written: %v", err)
	}
}

func TestConcurrentPatchesInProcess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	other, err := Open(dir, Options{}) // a second handle: its own committer and lock fd
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "agent:main:main", nil); err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 25
	errs := make(chan error, writers)
	for w := range writers {
		st := s
		if w%2 == 1 {
			st = other
		}
		go func() {
			for i := range each {
				if _, err := st.Patch(ctx, "agent:main:main", map[string]any{fieldName(w, i): i}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	m := readStore(t, s.Path())["agent:main:main"]
	for w := range writers {
		for i := range each {
			if _, ok := m[fieldName(w, i)]; !ok {
				t.Errorf("lost %s", fieldName(w, i))
			}
		}
	}
}

func fieldName(w, i int) string { return fmt.Sprintf("w%d_%03d", w, i) }

// TestPatchFuncIncrements checks that a read-modify-write through PatchFunc
// loses no increment when two store handles (two lock holders, as two
// processes are) count at the same time.
func TestPatchFuncIncrements(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	other, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "agent:main:main", nil); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 20
	errs := make(chan error, writers)
	for w := range writers {
		st := s
		if w%2 == 1 {
			st = other
		}
		go func() {
			for range each {
				if _, err := st.PatchFunc(ctx, "agent:main:main", func(cur SessionEntry) (any, error) {
					return map[string]any{"compactionCount": cur.CompactionCount + 1}, nil
				}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	e, err := s.Get("agent:main:main")
	if err != nil {
		t.Fatal(err)
	}
	if e.CompactionCount != writers*each {
		t.Fatalf("compactionCount = %d, want %d", e.CompactionCount, writers*each)
	}
	if _, err := s.PatchFunc(ctx, "agent:main:main", func(SessionEntry) (any, error) { return nil, ErrInvalid }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("fn error not returned: %v", err)
	}
}
