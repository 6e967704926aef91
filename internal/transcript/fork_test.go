package transcript

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// labelledSession writes a session with two branches and labels: on the
// path, off the path, relabelled, cleared, and cleared then set again.
func labelledSession(t *testing.T, path string) (ids map[string]string) {
	t.Helper()
	w := newWriter(t, path, testOpts(80))
	ids = map[string]string{}
	ids["u1"] = try(w.AppendMessage(userMsg("one"))).ok(t)
	ids["a1"] = try(w.AppendMessage(assistantMsg("one answer"))).ok(t)
	ids["u2"] = try(w.AppendMessage(userMsg("two"))).ok(t)
	ids["a2"] = try(w.AppendMessage(assistantMsg("two answer"))).ok(t)
	try(w.AppendLabel(ids["a2"], "first-a2")).ok(t)
	try(w.AppendLabel(ids["u1"], "first-u1")).ok(t)
	try(w.AppendLabel(ids["a2"], "renamed-a2")).ok(t) // keeps its place
	try(w.AppendLabel(ids["a1"], "gone")).ok(t)
	try(w.AppendLabel(ids["a1"], "")).ok(t)
	try(w.AppendLabel(ids["u2"], "u2")).ok(t)
	try(w.AppendLabel(ids["u2"], "")).ok(t)
	try(w.AppendLabel(ids["u2"], "back")).ok(t) // moves to the end
	if err := w.Branch(ids["a1"]); err != nil {
		t.Fatal(err)
	}
	ids["u3"] = try(w.AppendMessage(userMsg("three, another branch"))).ok(t)
	try(w.AppendLabel(ids["u3"], "off-path")).ok(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestFork: the path is copied byte for byte, labels on it re-appended in
// pi's order, the header points at the source, the context is the source's.
func TestFork(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.jsonl")
	ids := labelledSession(t, src)
	srcLines := fileLines(t, src)
	sf := openFile(t, src)

	cases := []struct {
		name       string
		leaf       string
		wantPath   []string // source entry keys copied
		wantLabels []string // "key=label" in file order
	}{
		{"at a2", ids["a2"], []string{"u1", "a1", "u2", "a2"}, []string{"a2=renamed-a2", "u1=first-u1", "u2=back"}},
		{"at u2", ids["u2"], []string{"u1", "a1", "u2"}, []string{"u1=first-u1", "u2=back"}},
		{"default leaf", "", []string{"u1", "a1", "u3"}, []string{"u1=first-u1", "u3=off-path"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := filepath.Join(dir, "fork"+string(rune('a'+i))+".jsonl")
			w := try(Fork(src, tc.leaf, dst, testOpts(byte(81+i)))).ok(t)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			lines := fileLines(t, dst)
			f := openFile(t, dst)
			abs, _ := filepath.Abs(src)
			if f.Header.ParentSession != abs || f.Header.Version != 3 || f.Header.ID == sf.Header.ID || f.Header.Cwd != sf.Header.Cwd {
				t.Errorf("header %s", lines[0])
			}
			if fi := try(os.Stat(dst)).ok(t); fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v", fi.Mode().Perm())
			}
			if len(lines) != 1+len(tc.wantPath)+len(tc.wantLabels) {
				t.Fatalf("%d lines, want %d", len(lines), 1+len(tc.wantPath)+len(tc.wantLabels))
			}
			for j, key := range tc.wantPath {
				want := srcLines[sf.Entry(ids[key]).Line-1]
				if lines[1+j] != want {
					t.Errorf("line %d is not the source's line of %s byte for byte\n got %s\nwant %s", j+2, key, lines[1+j], want)
				}
			}
			parent := ids[tc.wantPath[len(tc.wantPath)-1]]
			for j, kl := range tc.wantLabels {
				key, label, _ := strings.Cut(kl, "=")
				e := f.Entries[len(tc.wantPath)+j]
				if e.Type != "label" || e.TargetID() != ids[key] || e.Label() == nil || *e.Label() != label || e.ParentID != parent {
					t.Errorf("label %d: %+v, want %s on %s, parent %s", j, e, label, ids[key], parent)
				}
				if srcLabel := lastLabelEntry(sf, ids[key]); e.Timestamp != srcLabel.Timestamp {
					t.Errorf("label %d timestamp %s, want the source's %s", j, e.Timestamp, srcLabel.Timestamp)
				}
				parent = e.ID
			}
			leaf := tc.leaf
			if leaf == "" {
				leaf = ids["u3"]
			}
			want := buildCtx(t, sf, leaf)
			got := buildCtx(t, f, "")
			want.LeafID = got.LeafID // the fork's leaf is its last label
			sameContext(t, "fork", got, want)
		})
	}
}

func lastLabelEntry(f *File, target string) *Entry {
	var last *Entry
	for _, e := range f.Entries {
		if e.Type == "label" && e.TargetID() == target {
			last = e
		}
	}
	return last
}

// TestForkErrors: the destination is never overwritten; unknown leaves and
// empty sources are refused; nothing is left behind.
func TestForkErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.jsonl")
	writeSession(t, src, 2, 90)
	exists := filepath.Join(dir, "exists.jsonl")
	if err := os.WriteFile(exists, []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(filepath.Join(dir, "target.jsonl"), link); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, []byte(`{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, src, leaf, dst string
		want                 error
	}{
		{"existing destination", src, "", exists, fs.ErrExist},
		{"symlink destination", src, "", link, fs.ErrExist},
		{"unknown leaf", src, "nothere", filepath.Join(dir, "a.jsonl"), ErrUnknownEntry},
		{"no entries", empty, "", filepath.Join(dir, "b.jsonl"), nil},
		{"missing source", filepath.Join(dir, "none.jsonl"), "", filepath.Join(dir, "c.jsonl"), fs.ErrNotExist},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Fork(tc.src, tc.leaf, tc.dst, testOpts(91))
			if err == nil {
				_ = w.Close()
				t.Fatal("Fork succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
	if b := try(os.ReadFile(exists)).ok(t); string(b) != "mine\n" {
		t.Errorf("existing destination overwritten: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "target.jsonl")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("fork written through a symlink")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestForkSamples: forking every pi sample (v1 included, any path
// outside a store) at its default leaf gives the source's context, and the
// fork continues.
func TestForkSamples(t *testing.T) {
	t.Parallel()
	for i, src := range piSamples(t) {
		t.Run(filepath.Base(src), func(t *testing.T) {
			t.Parallel()
			sf := openFile(t, src)
			dst := filepath.Join(t.TempDir(), "fork.jsonl")
			w := try(Fork(src, "", dst, testOpts(byte(100+i)))).ok(t)
			leaf := w.LeafID()
			id := try(w.AppendMessage(userMsg("continuing the fork"))).ok(t)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			f := openFile(t, dst)
			want := buildCtx(t, sf, "")
			got := buildCtx(t, f, leaf)
			want.LeafID = got.LeafID
			sameContext(t, "fork", got, want)
			if e := f.Entry(id); e == nil || e.ParentID != leaf {
				t.Errorf("appended entry %+v, want parent %q", e, leaf)
			}
			wantLabels := map[string]string{}
			onPath := map[string]bool{}
			for _, e := range sf.Path("") {
				onPath[e.ID] = true
			}
			for k, v := range sf.Labels() {
				if onPath[k] {
					wantLabels[k] = v
				}
			}
			if got := f.Labels(); !reflect.DeepEqual(got, wantLabels) {
				t.Errorf("labels %v, want %v", got, wantLabels)
			}
		})
	}
}

// TestForkMidPathLabels: label entries in the middle of the path stay (they
// are parents of what follows), and a label they set that the source later
// cleared elsewhere is cleared in the fork.
func TestForkMidPathLabels(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.jsonl")
	w := newWriter(t, src, testOpts(95))
	try(w.AppendModelChange("p", "m")).ok(t)
	try(w.AppendThinkingLevel("high")).ok(t)
	u1 := try(w.AppendMessage(userMsg("one"))).ok(t)
	try(w.AppendLabel(u1, "x")).ok(t)
	a1 := try(w.AppendMessage(assistantMsg("answer"))).ok(t)
	try(w.AppendLabel(a1, "y")).ok(t)
	u2 := try(w.AppendMessage(userMsg("two"))).ok(t)
	if err := w.Branch(u1); err != nil {
		t.Fatal(err)
	}
	try(w.AppendLabel(u1, "")).ok(t) // cleared on another branch
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sf := openFile(t, src)
	fw := try(Fork(src, u2, filepath.Join(dir, "fork.jsonl"), testOpts(96))).ok(t)
	f := fw.File()
	defer func() { _ = fw.Close() }()
	if got, want := f.Labels(), map[string]string{a1: "y"}; !reflect.DeepEqual(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	want := buildCtx(t, sf, u2)
	got := buildCtx(t, f, "")
	if got.ThinkingLevel != "high" || got.Model == nil {
		t.Errorf("the chain is cut: thinking %q model %v", got.ThinkingLevel, got.Model)
	}
	want.LeafID = got.LeafID
	sameContext(t, "fork", got, want)
	if n := len(f.Roots()); n != 1 {
		t.Errorf("%d roots, want 1", n)
	}
}
