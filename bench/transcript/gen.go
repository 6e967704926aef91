package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/transcript"
)

// template is one entry of the real samples, replayed by the generator: its
// type and its fields other than type, id, parentId and timestamp, as a JSON
// object body without braces.
type template struct {
	typ  string
	body []byte
}

// loadTemplates reads the real pi samples (migrated to v3 by the reader) and
// keeps the entries a long session repeats: messages, model and thinking-level
// changes, custom and custom_message entries. The largest sample comes first.
func loadTemplates(dir string) ([]template, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no pi samples under %s (-samples)", dir)
	}
	sort.Slice(paths, func(i, j int) bool { return fileSize(paths[i]) > fileSize(paths[j]) })
	var out []template
	for _, p := range paths {
		ts, err := templatesOf(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no usable entries in the samples under %s", dir)
	}
	return out, nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func templatesOf(path string) ([]template, error) {
	f, err := transcript.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	var out []template
	for _, e := range f.Entries {
		switch e.Type {
		case "message", "model_change", "thinking_level_change", "custom", "custom_message":
		default:
			continue
		}
		raw, err := f.Raw(e)
		if err != nil {
			return nil, fmt.Errorf("sample %s: %w", path, err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("sample %s line %d: %w", path, e.Line, err)
		}
		for _, k := range []string{"type", "id", "parentId", "timestamp"} {
			delete(obj, k)
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, err := json.Marshal(k)
			if err != nil {
				return nil, err
			}
			b.Write(kb)
			b.WriteByte(':')
			b.Write(obj[k])
		}
		out = append(out, template{typ: e.Type, body: []byte(b.String())})
	}
	return out, nil
}

// genStats describes a generated transcript.
type genStats struct {
	Path        string  `json:"path"`
	Bytes       int64   `json:"bytes"`
	Entries     int     `json:"entries"`
	Messages    int     `json:"messages"`
	Branches    int     `json:"branches"`
	Compactions int     `json:"compactions"`
	Seconds     float64 `json:"generateSeconds"`
}

// generator writes a pi v3 transcript: the templates replayed in order as one
// chain, with side branches, branch summaries, labels and compactions. Ids,
// timestamps and content are functions of the position only, so the same
// target size always gives the same bytes.
type generator struct {
	w       *bufio.Writer
	tmpl    []template
	next    int // next template
	n       uint32
	clock   time.Time
	written int64
	stats   genStats
	recent  []string // the main chain's last ids, oldest first
	buf     []byte
}

// Generation constants: how often the chain branches and is labelled.
const (
	branchEvery = 1500 // main-chain entries between side branches
	branchLen   = 12   // entries of a side branch
	labelEvery  = 4000
	keepRecent  = 256 // main-chain ids remembered for branch points and firstKeptEntryId
	keptBack    = 120 // a compaction keeps the entries from this far back
)

// entryID returns the n-th id: 8 hex digits of a bijection of n, so ids are
// unique and look random.
func entryID(n uint32) string {
	x := n * 0x9E3779B1
	x ^= x >> 16
	x *= 0x85EBCA6B
	x ^= x >> 13
	return fmt.Sprintf("%08x", x)
}

func (g *generator) entry(typ, parent string, body []byte) (string, error) {
	g.n++
	id := entryID(g.n)
	g.clock = g.clock.Add(1500 * time.Millisecond)
	b := g.buf[:0]
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","id":"`...)
	b = append(b, id...)
	if parent == "" {
		b = append(b, `","parentId":null`...)
	} else {
		b = append(b, `","parentId":"`...)
		b = append(b, parent...)
		b = append(b, '"')
	}
	b = append(b, `,"timestamp":"`...)
	b = g.clock.AppendFormat(b, "2006-01-02T15:04:05.000Z")
	b = append(b, '"')
	if len(body) > 0 {
		b = append(b, ',')
		b = append(b, body...)
	}
	b = append(b, '}', '\n')
	g.buf = b
	n, err := g.w.Write(b)
	g.written += int64(n)
	g.stats.Entries++
	if typ == "message" {
		g.stats.Messages++
	}
	return id, err
}

// replay appends the next template as a child of parent.
func (g *generator) replay(parent string) (string, error) {
	t := g.tmpl[g.next%len(g.tmpl)]
	g.next++
	return g.entry(t.typ, parent, t.body)
}

func (g *generator) mainEntry(id string) {
	g.recent = append(g.recent, id)
	if len(g.recent) > keepRecent {
		g.recent = g.recent[len(g.recent)-keepRecent:]
	}
}

func (g *generator) back(k int) string {
	if k >= len(g.recent) {
		return g.recent[0]
	}
	return g.recent[len(g.recent)-1-k]
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

// generate writes a transcript of at least size bytes to path. compactAt
// lists the fractions of size at which a compaction entry is appended.
func generate(path string, size int64, tmpl []template, compactAt []float64) (genStats, error) {
	t0 := time.Now()
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600) // #nosec G304 -- the benchmark's own scratch file
	if err != nil {
		return genStats{}, fmt.Errorf("generate %s: %w", path, err)
	}
	g := &generator{
		w:     bufio.NewWriterSize(fh, 1<<20),
		tmpl:  tmpl,
		clock: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC),
	}
	g.stats.Path = path
	err = g.run(size, compactAt)
	if ferr := g.w.Flush(); err == nil {
		err = ferr
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return genStats{}, fmt.Errorf("generate %s: %w", path, err)
	}
	g.stats.Bytes = g.written
	g.stats.Seconds = time.Since(t0).Seconds()
	return g.stats, nil
}

func (g *generator) run(size int64, compactAt []float64) error {
	header := fmt.Sprintf(`{"type":"session","version":3,"id":"019b8d2c-5a00-7000-8000-%012x","timestamp":"2026-01-05T09:00:00.000Z","cwd":"/work/bench/project"}`+"\n", size)
	n, err := g.w.WriteString(header)
	g.written += int64(n)
	if err != nil {
		return err
	}
	leaf, err := g.entry("session_info", "", []byte(`"name":"generated benchmark session"`))
	if err != nil {
		return err
	}
	g.mainEntry(leaf)
	compacted := 0
	for sinceBranch, chain := 0, 0; g.written < size; chain++ {
		if leaf, err = g.replay(leaf); err != nil {
			return err
		}
		g.mainEntry(leaf)
		sinceBranch++
		switch {
		case compacted < len(compactAt) && float64(g.written) >= compactAt[compacted]*float64(size):
			compacted++
			body := fmt.Sprintf(`"summary":%s,"firstKeptEntryId":"%s","tokensBefore":%d,"details":{"readFiles":["packages/coding-agent/src/core/session-manager.ts","packages/ai/src/stream.ts"],"modifiedFiles":["packages/coding-agent/src/core/compaction.ts"]}`,
				jsonString(summaryText(compacted)), g.back(keptBack), g.written/4)
			if leaf, err = g.entry("compaction", leaf, []byte(body)); err != nil {
				return err
			}
			g.mainEntry(leaf)
			g.stats.Compactions++
		case sinceBranch >= branchEvery:
			// An abandoned side branch from a little way back, then a summary
			// of it on the main chain, as pi's /tree navigation writes.
			sinceBranch = 0
			from := g.back(30)
			side := from
			for range branchLen {
				if side, err = g.replay(side); err != nil {
					return err
				}
			}
			g.stats.Branches++
			body := fmt.Sprintf(`"fromId":"%s","summary":%s`, side, jsonString("Tried an alternative in a side branch; it was abandoned because the tests failed."))
			if leaf, err = g.entry("branch_summary", leaf, []byte(body)); err != nil {
				return err
			}
			g.mainEntry(leaf)
		case chain > 0 && chain%labelEvery == 0:
			body := fmt.Sprintf(`"targetId":"%s","label":"checkpoint-%d"`, g.back(5), chain/labelEvery)
			if leaf, err = g.entry("label", leaf, []byte(body)); err != nil {
				return err
			}
			g.mainEntry(leaf)
		}
	}
	if len(g.recent) == 0 {
		return errors.New("nothing generated")
	}
	return nil
}

func summaryText(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Compaction %d\n\nGoal: make the session manager stream large transcripts.\n\n", i)
	for k := range 40 {
		fmt.Fprintf(&b, "- step %d: read packages/coding-agent/src/core/session-manager.ts, changed the loader, ran the tests (%d passed).\n", k+1, 100+k)
	}
	return b.String()
}
