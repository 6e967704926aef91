package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestOpenMatchesRead checks that the on-disk index (Open) and the in-memory
// read (Read) of every sample agree entry by entry and build the same
// context at every entry taken as a leaf.
func TestOpenMatchesRead(t *testing.T) {
	t.Parallel()
	for _, p := range piSamples(t) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			lazy, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lazy.Close() }()
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			mem, err := Read(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if len(lazy.Entries) != len(mem.Entries) {
				t.Fatalf("%d entries, Read has %d", len(lazy.Entries), len(mem.Entries))
			}
			lightCount := 0
			for i, e := range lazy.Entries {
				if e.Raw == nil {
					lightCount++
				}
				full, err := lazy.Full(e)
				if err != nil {
					t.Fatal(err)
				}
				want := *mem.Entries[i]
				got := *full
				got.off, got.size, want.off, want.size = 0, 0, 0, 0
				got.msgOff, got.msgEnd, want.msgOff, want.msgEnd = 0, 0, 0, 0
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("line %d differs:\n got %+v\nwant %+v", e.Line, got, want)
				}
				// the resident index fields of a light entry match too
				if e.Type != want.Type || e.ID != want.ID || e.ParentID != want.ParentID || e.Role != want.Role ||
					e.Provider != want.Provider || e.ModelID != want.ModelID || e.CustomType != want.CustomType || e.Timestamp != want.Timestamp {
					t.Fatalf("line %d: light fields %+v, want %+v", e.Line, e, want)
				}
			}
			if mem.Header.Version >= CurrentVersion && lightCount == 0 {
				t.Error("no entry was kept on disk")
			}
			for i, e := range mem.Entries {
				if !contextLeaf(i, len(mem.Entries)) {
					continue
				}
				want, err := mem.BuildContext(e.ID)
				if err != nil {
					t.Fatal(err)
				}
				got, err := lazy.BuildContext(e.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("context at %s differs", e.ID)
				}
			}
		})
	}
}

// contextLeaf reports whether TestOpenMatchesRead compares the contexts at entry i of n. Every
// entry of the small samples; of the large one (a single chain of 1019 entries, where each
// context re-reads up to a megabyte, which the race detector makes costly) the first and last 64
// and every 7th between them, so leaves of every entry type are still compared.
func contextLeaf(i, n int) bool {
	return n <= 256 || i < 64 || i >= n-64 || i%7 == 0
}

func TestFullAfterRewrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.jsonl")
	big := strings.Repeat("x", 1024)
	content := `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n" +
		`{"type":"message","id":"aaaaaaaa","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"` + big + `","timestamp":1}}` + "\n"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if f.Entries[0].Raw != nil {
		t.Fatal("large message kept resident")
	}
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(content, "aaaaaaaa", "bbbbbbbb")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Full(f.Entries[0]); err == nil || !strings.Contains(err.Error(), "changed on disk") {
		t.Fatalf("Full after rewrite: %v", err)
	}
	if _, err := f.BuildContext(""); err == nil {
		t.Fatal("BuildContext after rewrite succeeded")
	}
	_ = f.Close()
	if _, err := f.Full(f.Entries[0]); err == nil {
		t.Fatal("Full after Close succeeded")
	}
}

func TestParseLineExactKeys(t *testing.T) {
	tests := []struct {
		line string
		ok   bool
		want Entry
	}{
		{`{"type":"message","id":"a1","parentId":null,"timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"hi \"there\" \u00e9\\"}],"provider":"p","model":"m","usage":{"input":1.5e3,"x":-0.1}}}`, true,
			Entry{Type: "message", ID: "a1", Timestamp: "t", Role: "assistant", Provider: "p", ModelID: "m"}},
		{`  {"message":{"role":"user"},"type":"message","id":"b","parentId":"a"}  `, true,
			Entry{Type: "message", ID: "b", ParentID: "a", Role: "user"}},
		{`{"type":"custom","customType":"nexus.run","id":"\u0041","data":{"a":[true,false,null,[],{},0,-0.5e+2]}}`, true,
			Entry{Type: "custom", ID: "A", CustomType: "nexus.run"}},
		// JSON.parse semantics: keys match exactly and the last duplicate wins
		{`{"Type":"label","tYpe":"x","type":"message","id":"a","id":"b"}`, true, Entry{Type: "message", ID: "b"}},
		{`{"type":{"nested":1},"id":7,"message":"str"}`, true, Entry{}},
		{`{"type":"message","id":"a","message":{"role":"user","content":"torn`, false, Entry{}},
		{`{"type":"message","id":"a"`, false, Entry{}},
		{`{"type":"message","id":"a"}x`, false, Entry{}},
		{`{"type":"message","id":"a","n":01}`, false, Entry{}},
		{`{"type":"message","id":"a","n":1.}`, false, Entry{}},
		{`{"type":"message","id":"a","s":"bad \q escape"}`, false, Entry{}},
		{"{\"type\":\"message\",\"s\":\"raw \x01 control\"}", false, Entry{}},
		{`{"type":"message","a":[1,]}`, false, Entry{}},
		{`{"type":"message",}`, false, Entry{}},
		{`{"type":"message","a":tru}`, false, Entry{}},
		{`[1,2]`, false, Entry{}},
		{strings.Repeat("[", maxScanDepth+10) + strings.Repeat("]", maxScanDepth+10), false, Entry{}},
	}
	for _, tc := range tests {
		got, err := ParseLine([]byte(tc.line))
		if (err == nil) != tc.ok {
			t.Errorf("ParseLine(%.60q) err = %v, want ok=%v", tc.line, err, tc.ok)
			continue
		}
		if !tc.ok {
			continue
		}
		w := tc.want
		if got.Type != w.Type || got.ID != w.ID || got.ParentID != w.ParentID || got.Timestamp != w.Timestamp ||
			got.Role != w.Role || got.Provider != w.Provider || got.ModelID != w.ModelID || got.CustomType != w.CustomType {
			t.Errorf("ParseLine(%.60q) = %+v, want %+v", tc.line, got, w)
		}
	}
}

// FuzzParseLineExact checks the scanner-based ParseLine against
// encoding/json: it accepts exactly the JSON objects, and its fields are
// those of an exact-key decode.
func FuzzParseLineExact(f *testing.F) {
	f.Add([]byte(`{"type":"message","id":"a1","parentId":null,"timestamp":"t","message":{"role":"assistant","content":[],"provider":"p","model":"m"}}`))
	f.Add([]byte(`{"type":"custom","customType":"x\u00e9","id":"b","data":{"k":[1,2.5e-3,"s"]}}`))
	f.Add([]byte(`{"a":"\ud800","tYpe":{}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseLine(line)
		trimmed := bytes.TrimLeft(line, " \t\r\n")
		isObj := json.Valid(line) && len(trimmed) > 0 && trimmed[0] == '{'
		if (err == nil) != isObj {
			t.Fatalf("ParseLine(%q) err=%v, json object=%v", line, err, isObj)
		}
		if err != nil {
			return
		}
		// the trusted parse used to read validated lines back agrees
		var tr Entry
		if err := parseInto(line, true, &tr); err != nil || !reflect.DeepEqual(&tr, e) {
			t.Fatalf("%q: trusted parse %+v (%v), strict %+v", line, tr, err, e)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		strOf := func(k string) string {
			var s string
			if raw, ok := m[k]; ok && len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
				return s
			}
			return ""
		}
		if e.Type != strOf("type") || e.ID != strOf("id") || e.ParentID != strOf("parentId") ||
			e.Timestamp != strOf("timestamp") || e.CustomType != strOf("customType") {
			t.Fatalf("%q: ParseLine %+v disagrees with exact decode %v", line, e, m)
		}
	})
}

// writeBig writes a v3 transcript of at least size bytes made of the real
// large session's messages, chained with fresh ids.
func writeBig(tb testing.TB, size int) string {
	tb.Helper()
	src := try(os.Open(piSample(tb, largeV1))).ok(tb)
	f, err := Read(src)
	_ = src.Close()
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(tb.TempDir(), "big.jsonl")
	var buf bytes.Buffer
	buf.WriteString(`{"type":"session","version":3,"id":"019a0000-0000-7000-8000-000000000000","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}` + "\n")
	n, parent := 0, "null"
	for buf.Len() < size {
		for _, e := range f.Entries {
			if e.Type != "message" {
				continue
			}
			n++
			id := fmt.Sprintf("%08x", n)
			fmt.Fprintf(&buf, `{"type":"message","id":"%s","parentId":%s,"timestamp":%q,"message":%s}`+"\n", id, parent, e.Timestamp, e.Message)
			parent = `"` + id + `"`
		}
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

func BenchmarkOpenContext(b *testing.B) {
	p := writeBig(b, 64<<20)
	st, _ := os.Stat(p)
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.BuildContext(""); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
}

func BenchmarkOpenOnly(b *testing.B) {
	p := writeBig(b, 64<<20)
	st, _ := os.Stat(p)
	b.SetBytes(st.Size())
	for b.Loop() {
		f, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
}

func BenchmarkContextOnly(b *testing.B) {
	p := writeBig(b, 64<<20)
	st, _ := os.Stat(p)
	b.SetBytes(st.Size())
	f, err := Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for b.Loop() {
		if _, err := f.BuildContext(""); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParallelIndex splits files into chunks from any size and checks the
// joined index against the sequential read, line numbers and notes included.
func TestParallelIndex(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	big := strings.Repeat("y", 3*200)
	var b strings.Builder
	b.WriteString(`{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n")
	parent := "null"
	for i := 1; i <= 200; i++ {
		id := fmt.Sprintf("%08x", i)
		switch {
		case i%37 == 0:
			b.WriteString("not json at all\n")
		case i%53 == 0:
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, `{"type":"message","id":"%s","parentId":%s,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"%d %s","timestamp":1}}`+"\n", id, parent, i, big[:i*3])
		parent = `"` + id + `"`
	}
	b.WriteString(`{"type":"message","id":"torn","parentId":`) // torn last line
	p := filepath.Join(t.TempDir(), "p.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	mem, err := Read(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	par, err := open(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = par.Close() }()
	if !reflect.DeepEqual(par.Notes, mem.Notes) {
		t.Errorf("notes\n got %q\nwant %q", par.Notes, mem.Notes)
	}
	if len(par.Entries) != len(mem.Entries) {
		t.Fatalf("%d entries, want %d", len(par.Entries), len(mem.Entries))
	}
	for i, e := range par.Entries {
		full, err := par.Full(e)
		if err != nil {
			t.Fatal(err)
		}
		if full.Line != mem.Entries[i].Line || string(full.Raw) != string(mem.Entries[i].Raw) {
			t.Fatalf("entry %d: line %d %q, want line %d", i, full.Line, full.Raw, mem.Entries[i].Line)
		}
	}
	want, _ := mem.BuildContext("")
	got, err := par.BuildContext("")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("context differs (%v)", err)
	}
}

// TestContextMessagesStreams checks the streamed context against
// BuildContext in batches down to one entry, an early stop, and a read
// error in the middle of the stream.
func TestContextMessagesStreams(t *testing.T) {
	for _, name := range []string{"pi-mono-large-session-v1.jsonl", "getspecstory-compaction.jsonl", "getspecstory-branching.jsonl"} {
		f := piFile(t, name)
		want := mustContext(t, f, "")
		for _, batch := range []int{1, 4 << 10, streamBatch} {
			ctx, msgs := f.contextMessages("", batch, true)
			var got []json.RawMessage
			for m, err := range msgs {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, bytes.Clone(m)) // valid only until the next batch
			}
			if len(ctx.Messages) != 0 || ctx.LeafID != want.LeafID || !reflect.DeepEqual(ctx.Model, want.Model) || ctx.ThinkingLevel != want.ThinkingLevel {
				t.Fatalf("%s: context header %+v, want %+v", name, ctx, want)
			}
			if !reflect.DeepEqual(got, want.Messages) && (len(got) != 0 || len(want.Messages) != 0) {
				t.Fatalf("%s batch %d: %d messages, want %d", name, batch, len(got), len(want.Messages))
			}
		}
		_, msgs := f.contextMessages("", 1, true)
		n := 0
		for _, err := range msgs {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if n == 2 {
				break
			}
		}
		if n != 2 {
			t.Fatalf("early stop: %d", n)
		}
	}

	p := writeBig(t, 1<<20)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	_, msgs := f.contextMessages("", 64<<10, true)
	var gotErr error
	n := 0
	for _, err := range msgs {
		if err != nil {
			gotErr = err
			break
		}
		if n++; n == 10 {
			// rewrite the file under the open index: later batches must fail loudly
			data, _ := os.ReadFile(p)
			if err := os.WriteFile(p, bytes.ReplaceAll(data, []byte(`"id":"0000`), []byte(`"id":"ffff`)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if gotErr == nil || !strings.Contains(gotErr.Error(), "changed on disk") {
		t.Fatalf("stream over a rewritten file: err %v after %d messages", gotErr, n)
	}
}

// TestStringSpecialAtEveryOffset puts each kind of special byte at every
// position of strings around the scanner's eight-byte words.
func TestStringSpecialAtEveryOffset(t *testing.T) {
	specials := []string{`\"`, `\\`, `\n`, `\u00e9`, "\x01", "\x1f", `é`, `\x`}
	for n := 0; n <= 20; n++ {
		for pos := 0; pos <= n; pos++ {
			for _, sp := range specials {
				body := strings.Repeat("a", pos) + sp + strings.Repeat("b", n-pos)
				line := []byte(`{"type":"message","id":"` + body + `","x":"` + body + `"}`)
				e, err := ParseLine(line)
				if (err == nil) != json.Valid(line) {
					t.Fatalf("%q: ParseLine err %v, json.Valid %v", line, err, json.Valid(line))
				}
				if err != nil {
					continue
				}
				var want struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(line, &want); err != nil || e.ID != want.ID {
					t.Fatalf("%q: id %q, want %q", line, e.ID, want.ID)
				}
			}
		}
	}
}
