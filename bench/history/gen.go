package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/index/source"
)

// The corpus generator writes transcripts of the five agent tools the history index reads
// (internal/index/source), each in its tool's on-disk layout, so that every adapter's Discover
// finds them and its Parse reads them without a skipped line. Text is drawn from a generated
// vocabulary with Zipf-distributed frequencies plus fixed marker terms of known rarity, so that
// the suggested queries span rare to frequent terms. The same seed gives the same bytes.

// CorpusFile is the description Generate leaves at the top of the corpus directory, outside
// every source root, so a later run can reuse the corpus (LoadCorpus) instead of regenerating it.
const CorpusFile = "corpus.json"

// SourceNames are the adapters the corpus feeds, in the order their seeds are drawn.
func SourceNames() []string { return []string{"pi", "claude-code", "codex", "openclaw", "nexus"} }

// SourceStats is what the generator wrote for one source. Messages and ToolCalls are counted the
// way the source's adapter counts them, so a parse of every file must find exactly these.
type SourceStats struct {
	// Roots are the directories to pass to the adapter's Discover.
	Roots []string `json:"roots"`
	// Files are the transcripts Discover finds (subagent and archived ones included).
	Files int64 `json:"files"`
	// Subagents are the sessions the adapter reports as subagents.
	Subagents int64 `json:"subagents"`
	Messages  int64 `json:"messages"`
	ToolCalls int64 `json:"toolCalls"`
	// Bytes are every file under the roots, session stores included.
	Bytes int64 `json:"bytes"`
	// TextBytes are the bytes of message and tool-result text generated (before any duplication
	// a format does, such as Codex's event_msg copies or Claude Code's toolUseResult).
	TextBytes int64 `json:"textBytes"`
	// Secrets are the secret-shaped strings planted (AWS access key ids, GitHub tokens).
	Secrets int64 `json:"secrets"`
	// Markers are, per marker term or phrase, the texts it was planted in. Markers go only into
	// text the adapters index (message text, tool results), never into thinking or reasoning.
	Markers map[string]int64 `json:"markers"`
	// Usage is the token usage the adapter must report, summed over the source's files.
	Usage source.Usage `json:"usage"`
}

// Query is a suggested query and what kind of selectivity it stands for.
type Query struct {
	Kind string `json:"kind"` // rare, mid, two-words, frequent, phrase
	// Text is the query as a user types it: one word, several words (all must occur), or a
	// phrase in double quotes.
	Text string `json:"text"`
	// Planted is, for a marker term or phrase, the texts it was planted in (-1 when unknown:
	// vocabulary words occur by chance).
	Planted int64 `json:"planted"`
}

// Corpus describes a generated corpus.
type Corpus struct {
	Dir       string                  `json:"dir"`
	Seed      int64                   `json:"seed"`
	Size      int64                   `json:"size"` // requested bytes
	Sources   map[string]*SourceStats `json:"sources"`
	Suggested []Query                 `json:"queries"`
}

// Queries returns the suggested queries: rare marker terms (one planted nowhere), words of
// middle frequency, pairs of words, frequent words and quoted phrases.
func (c *Corpus) Queries() []string {
	out := make([]string, len(c.Suggested))
	for i, q := range c.Suggested {
		out[i] = q.Text
	}
	return out
}

// Roots returns every source's roots, in SourceNames order.
func (c *Corpus) Roots() []string {
	var out []string
	for _, name := range SourceNames() {
		if st := c.Sources[name]; st != nil {
			out = append(out, st.Roots...)
		}
	}
	return out
}

// Total sums the figures of every source.
func (c *Corpus) Total() SourceStats {
	var t SourceStats
	t.Markers = map[string]int64{}
	for _, name := range SourceNames() {
		st := c.Sources[name]
		if st == nil {
			continue
		}
		t.Roots = append(t.Roots, st.Roots...)
		t.Files += st.Files
		t.Subagents += st.Subagents
		t.Messages += st.Messages
		t.ToolCalls += st.ToolCalls
		t.Bytes += st.Bytes
		t.TextBytes += st.TextBytes
		t.Secrets += st.Secrets
		t.Usage = t.Usage.Add(st.Usage)
		for k, v := range st.Markers {
			t.Markers[k] += v
		}
	}
	return t
}

// LoadCorpus reads the description Generate left in dir.
func LoadCorpus(dir string) (*Corpus, error) {
	b, err := os.ReadFile(filepath.Join(dir, CorpusFile)) //nolint:gosec // the corpus the user names
	if err != nil {
		return nil, fmt.Errorf("load corpus: %w", err)
	}
	var c Corpus
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("load corpus %s: %w", dir, err)
	}
	return &c, nil
}

// Generate writes a corpus of about size bytes (split evenly between the sources) into dir,
// which must be empty or not exist. Each source is generated by its own goroutine from its own
// seed, so the bytes do not depend on scheduling.
func Generate(ctx context.Context, dir string, size int64, seed int64) (*Corpus, error) {
	if size <= 0 {
		return nil, fmt.Errorf("generate: size %d: must be positive", size)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if err := emptyDir(abs); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)) //nolint:gosec // a reproducible corpus, not secrets
	lx := newLexicon(r)
	names := SourceNames()
	seeds := make([]uint64, len(names))
	for i := range seeds {
		seeds[i] = r.Uint64()
	}
	c := &Corpus{Dir: abs, Seed: seed, Size: size, Sources: map[string]*SourceStats{}}
	perSource := size / int64(len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		st := newStats()
		c.Sources[name] = st
		g := &generator{lx: lx, dir: abs, st: st, target: perSource,
			r: rand.New(rand.NewPCG(seeds[i], uint64(i))), //nolint:gosec // reproducible
		}
		wg.Go(func() { errs[i] = g.run(ctx, name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	for _, name := range names {
		st := c.Sources[name]
		n, err := treeBytes(st.Roots)
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		st.Bytes = n
	}
	skel, err := skeleton(lx)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	c.Suggested = suggest(lx, skel, c.Total().Markers)
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if err := os.WriteFile(filepath.Join(abs, CorpusFile), append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	return c, nil
}

func newStats() *SourceStats { return &SourceStats{Markers: map[string]int64{}} }

// emptyDir creates dir (0700) or checks that it is an empty directory: a corpus written over
// another would mix the two and its figures would be wrong.
func emptyDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("generate: %s is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("generate: %s is not empty", dir)
	}
	return nil
}

func treeBytes(roots []string) (int64, error) {
	var n int64
	for _, root := range roots {
		err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				fi, err := d.Info()
				if err != nil {
					return err
				}
				n += fi.Size()
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("size of %s: %w", root, err)
		}
	}
	return n, nil
}

// marker is a term planted in a fixed share of the texts.
type marker struct {
	text string
	p    float64 // chance per text
}

// markerTerms are real technical terms and phrases at rarities from one text in 500 to one in
// half a million; the generated vocabulary never contains them. CVE-2024-3094 also tests how a
// query parser treats hyphens.
func markerTerms() []marker {
	return []marker{
		{"kubeconfig", 2e-3},
		{"deadlock", 1e-3},
		{"segfault", 3e-4},
		{"OOMKilled", 1e-4},
		{"flakiness", 3e-5},
		{"CVE-2024-3094", 1e-5},
		{"xylophagous", 2e-6},
		{"connection refused", 2e-3},
		{"permission denied", 1e-3},
		{"context deadline exceeded", 2e-4},
		{"index out of range", 5e-5},
	}
}

// absentTerm is planted nowhere: the query that must find nothing.
const absentTerm = "zzyzxquorble"

// secretShare is the chance per text of a secret-shaped string.
const secretShare = 5e-4

// vocabSize is the number of generated words.
const vocabSize = 50000

// lexicon is the vocabulary, its Zipf sampler (alias method: one random number per word) and
// the pools every source draws from. It is read-only once built.
type lexicon struct {
	words     []string
	thresh    []uint64 // alias method: keep word i when the low 32 bits are below thresh[i]
	alias     []uint32
	projects  []string // working directories
	markers   []marker
	markTotal float64
}

func newLexicon(r *rand.Rand) *lexicon {
	lx := &lexicon{markers: markerTerms()}
	taken := map[string]bool{absentTerm: true}
	for _, m := range lx.markers {
		lx.markTotal += m.p
		taken[strings.ToLower(m.text)] = true
	}
	onsets := []string{"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
		"br", "ch", "cr", "dr", "fl", "gr", "kl", "pl", "pr", "sh", "sk", "sp", "st", "th", "tr"}
	vowels := []string{"a", "e", "i", "o", "u", "ai", "ea", "ie", "oa", "ou"}
	codas := []string{"", "", "", "n", "r", "s", "l", "t", "m", "k", "x", "nd", "st", "rk"}
	lx.words = make([]string, 0, vocabSize)
	var b strings.Builder
	for len(lx.words) < vocabSize {
		rank := len(lx.words)
		syl := 2 + r.IntN(3)
		switch {
		case rank < 60:
			syl = 1 + r.IntN(2)
		case rank < 3000:
			syl = 2 + r.IntN(2)
		}
		b.Reset()
		for range syl {
			b.WriteString(onsets[r.IntN(len(onsets))])
			b.WriteString(vowels[r.IntN(len(vowels))])
			b.WriteString(codas[r.IntN(len(codas))])
		}
		w := b.String()
		if len(w) < 2 || taken[w] {
			continue
		}
		taken[w] = true
		lx.words = append(lx.words, w)
	}
	lx.buildAlias(1.0)
	users := []string{"alice", "bob", "dev", "ci"}
	seen := map[string]bool{}
	for len(lx.projects) < 50 {
		p := "/home/" + users[r.IntN(len(users))] + "/src/" + lx.words[2000+r.IntN(vocabSize-2000)] +
			"-" + lx.words[2000+r.IntN(vocabSize-2000)]
		if !seen[p] {
			seen[p] = true
			lx.projects = append(lx.projects, p)
		}
	}
	return lx
}

// buildAlias prepares Vose's alias tables for P(rank k) ∝ 1/(k+1)^s.
func (lx *lexicon) buildAlias(s float64) {
	n := len(lx.words)
	p := make([]float64, n)
	var sum float64
	for k := range p {
		p[k] = 1 / math.Pow(float64(k+1), s)
		sum += p[k]
	}
	var small, large []int
	for k := range p {
		p[k] = p[k] / sum * float64(n)
		if p[k] < 1 {
			small = append(small, k)
		} else {
			large = append(large, k)
		}
	}
	lx.thresh = make([]uint64, n)
	lx.alias = make([]uint32, n)
	for len(small) > 0 && len(large) > 0 {
		l, g := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		lx.thresh[l] = uint64(p[l] * (1 << 32))
		lx.alias[l] = uint32(g)
		p[g] -= 1 - p[l]
		if p[g] < 1 {
			large = large[:len(large)-1]
			small = append(small, g)
		}
	}
	for _, k := range append(small, large...) {
		lx.thresh[k] = 1 << 32
		lx.alias[k] = uint32(k)
	}
}

func (lx *lexicon) word(r *rand.Rand) string {
	u := r.Uint64()
	i := (u >> 32) * uint64(len(lx.words)) >> 32
	if u&0xffffffff < lx.thresh[i] {
		return lx.words[i]
	}
	return lx.words[lx.alias[i]]
}

// skeleton is what every line holds besides the generated text: one session of each source
// written with no text, and every project path. A query word found in it would match records
// for their structure, not their text, so suggest skips such words.
func skeleton(lx *lexicon) (string, error) {
	var mem bytes.Buffer
	for i, name := range SourceNames() {
		g := &generator{lx: lx, dir: "/skeleton", st: newStats(), noText: true, mem: &mem,
			r: rand.New(rand.NewPCG(uint64(i), 1))} //nolint:gosec // reproducible
		g.target = 1
		if err := g.run(context.Background(), name); err != nil {
			return "", fmt.Errorf("skeleton: %w", err)
		}
	}
	for _, p := range lx.projects {
		mem.WriteString(p)
		mem.WriteByte('\n')
	}
	return strings.ToLower(mem.String()), nil
}

// suggest picks the queries. Vocabulary words are taken at fixed ranks, moving to the next rank
// while the word is shorter than 4 letters (ripgrep matches substrings: a two-letter word is
// inside too many others) or occurs in the skeleton.
func suggest(lx *lexicon, skel string, planted map[string]int64) []Query {
	used := map[int]bool{}
	at := func(rank int) string {
		for k := rank; k < len(lx.words); k++ {
			w := lx.words[k]
			if !used[k] && len(w) >= 4 && !strings.Contains(skel, w) {
				used[k] = true
				return w
			}
		}
		return lx.words[rank]
	}
	mark := func(kind, text string) Query { return Query{Kind: kind, Text: text, Planted: planted[text]} }
	word := func(kind, text string) Query { return Query{Kind: kind, Text: text, Planted: -1} }
	f0, f1, f2, f3 := at(0), at(1), at(3), at(12)
	m1, m2, m3, m4 := at(300), at(1500), at(6000), at(25000)
	qs := []Query{
		mark("rare", "xylophagous"),
		mark("rare", "CVE-2024-3094"),
		mark("rare", "flakiness"),
		mark("rare", "OOMKilled"),
		{Kind: "rare", Text: absentTerm},
		word("mid", m1),
		word("mid", m2),
		word("mid", m3),
		word("mid", m4),
		word("two-words", m1+" "+m2),
		word("two-words", "segfault "+f1),
		word("two-words", f0+" "+f2),
		word("two-words", "kubeconfig "+m1),
		word("frequent", f0),
		word("frequent", f2),
		word("frequent", f3),
		mark("phrase", "connection refused"),
		mark("phrase", "context deadline exceeded"),
		mark("phrase", "index out of range"),
		word("phrase", f0+" "+f1),
	}
	for i := range qs {
		if qs[i].Kind == "phrase" {
			qs[i].Text = `"` + qs[i].Text + `"`
		}
	}
	return qs
}

// generator writes one source's sessions until its share of the bytes is written.
type generator struct {
	lx     *lexicon
	r      *rand.Rand
	dir    string // corpus root
	st     *SourceStats
	target int64
	// noText writes sessions without text or vocabulary words (the skeleton).
	noText bool
	// mem, when set, receives every file instead of the disk.
	mem *bytes.Buffer

	out     output
	written int64 // transcript bytes so far
	now     time.Time
	scratch [3][]byte
	tsBuf   []byte
	tmp     []byte
}

// timeBase starts the year the sessions are spread over.
func timeBase() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }

// noFollow refuses to open a symlink planted at a file's path.
const noFollow = syscall.O_NOFOLLOW

func (g *generator) run(ctx context.Context, name string) error {
	switch name {
	case "pi":
		return g.runPi(ctx)
	case "claude-code":
		return g.runClaude(ctx)
	case "codex":
		return g.runCodex(ctx)
	case "openclaw":
		return g.runOpenClaw(ctx)
	case "nexus":
		return g.runNexus(ctx)
	}
	return fmt.Errorf("no generator for source %q", name)
}

// more reports whether another session is wanted.
func (g *generator) more(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("generate: %w", err)
	}
	return g.written < g.target, nil
}

// startSession sets the clock to a random moment of the year.
func (g *generator) startSession() {
	g.now = timeBase().Add(time.Duration(g.r.Int64N(int64(365 * 24 * time.Hour))))
	g.now = g.now.Truncate(time.Millisecond)
}

// tick advances the clock by up to max, at least 100 ms.
func (g *generator) tick(maxDur time.Duration) {
	g.now = g.now.Add(100*time.Millisecond + time.Duration(g.r.Int64N(int64(maxDur)))).Truncate(time.Millisecond)
}

func (g *generator) project() string { return g.lx.projects[g.r.IntN(len(g.lx.projects))] }

// output is the file being written, through one large buffer reused for every file.
type output struct {
	bw *bufio.Writer
	cw countWriter
	f  *os.File
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("write: %w", err)
	}
	return n, nil
}

// create opens path (new, 0600, parents 0700) as the output.
func (g *generator) create(path string) error {
	if g.mem != nil {
		g.out.cw = countWriter{w: g.mem}
	} else {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600) //nolint:gosec // under the corpus dir
		if err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		g.out.f = f
		g.out.cw = countWriter{w: f}
	}
	if g.out.bw == nil {
		g.out.bw = bufio.NewWriterSize(&g.out.cw, 1<<20)
	} else {
		g.out.bw.Reset(&g.out.cw)
	}
	return nil
}

// finish flushes and closes the output and counts the file.
func (g *generator) finish() error {
	err := g.out.bw.Flush()
	if g.out.f != nil {
		if cerr := g.out.f.Close(); err == nil {
			err = cerr
		}
		g.out.f = nil
	}
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	g.written += g.out.cw.n
	g.st.Files++
	return nil
}

func (g *generator) w(s string)   { _, _ = g.out.bw.WriteString(s) }
func (g *generator) wb(b []byte)  { _, _ = g.out.bw.Write(b) }
func (g *generator) wi(n int64)   { g.wb(strconv.AppendInt(g.tsBuf[:0], n, 10)) }
func (g *generator) wq(s string)  { g.w(`"`); g.w(s); g.w(`"`) }
func (g *generator) wqb(b []byte) { g.w(`"`); g.wb(b); g.w(`"`) }

// wts writes the clock as a quoted JavaScript toISOString timestamp.
func (g *generator) wts() {
	g.tsBuf = append(g.tsBuf[:0], '"')
	g.tsBuf = g.now.AppendFormat(g.tsBuf, tsLayout)
	g.tsBuf = append(g.tsBuf, '"')
	g.wb(g.tsBuf)
}

const tsLayout = "2006-01-02T15:04:05.000Z"

// ms is the clock in Unix milliseconds.
func (g *generator) ms() int64 { return g.now.UnixMilli() }

// size draws a text length: log-normal around median, within [lo, hi].
func (g *generator) size(median float64, lo, hi int) int {
	n := int(median * math.Exp(0.9*g.r.NormFloat64()))
	return max(lo, min(hi, n))
}

// text appends about n bytes of prose to dst: sentences of vocabulary words, paragraphs
// separated by an escaped newline. With marks, the text may carry one marker term or one secret
// (counted in the stats). The result needs no JSON escaping beyond what it holds.
func (g *generator) text(dst []byte, n int, marks bool) []byte {
	if g.noText || n <= 0 {
		return dst
	}
	start := len(dst)
	insert, at := "", -1
	if marks {
		u := g.r.Float64()
		switch {
		case u < g.lx.markTotal:
			for _, m := range g.lx.markers {
				if u < m.p {
					insert = m.text
					g.st.Markers[m.text]++
					break
				}
				u -= m.p
			}
		case u < g.lx.markTotal+secretShare:
			insert = g.secret()
			g.st.Secrets++
		}
		if insert != "" {
			at = g.r.IntN(n/7 + 1)
		}
	}
	words, left, sentences := 0, 0, 0
	for len(dst)-start < n {
		capital := false
		switch {
		case left == 0 && words > 0:
			sentences++
			if sentences%4 == 0 {
				dst = append(dst, `.\n\n`...)
			} else {
				dst = append(dst, ". "...)
			}
			left, capital = 5+g.r.IntN(14), true
		case left == 0:
			left, capital = 5+g.r.IntN(14), true
		default:
			dst = append(dst, ' ')
		}
		if words == at {
			dst = append(dst, insert...)
			dst = append(dst, ' ')
		}
		w := g.lx.word(g.r)
		if capital {
			dst = append(dst, w[0]-('a'-'A'))
			dst = append(dst, w[1:]...)
		} else {
			dst = append(dst, w...)
		}
		words++
		left--
	}
	if at >= words {
		dst = append(dst, ' ')
		dst = append(dst, insert...)
	}
	dst = append(dst, '.')
	g.st.TextBytes += int64(len(dst) - start)
	return dst
}

// words appends k vocabulary words separated by sep (none when noText).
func (g *generator) words(dst []byte, k int, sep string) []byte {
	if g.noText {
		return dst
	}
	for i := range k {
		if i > 0 {
			dst = append(dst, sep...)
		}
		dst = append(dst, g.lx.word(g.r)...)
	}
	return dst
}

const (
	upperAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	alnum      = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	hexDigits  = "0123456789abcdef"
	base64Abc  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
)

// secret is an AWS access key id or a GitHub token in the context a transcript shows them.
func (g *generator) secret() string {
	if g.r.IntN(2) == 0 {
		return "aws_access_key_id = AKIA" + string(g.chars(nil, upperAlnum, 16))
	}
	return "GITHUB_TOKEN=ghp_" + string(g.chars(nil, alnum, 36))
}

// chars appends n characters drawn from abc.
func (g *generator) chars(dst []byte, abc string, n int) []byte {
	var u uint64
	for i := range n {
		if i%8 == 0 {
			u = g.r.Uint64()
		}
		dst = append(dst, abc[int(u&0xff)%len(abc)])
		u >>= 8
	}
	return dst
}

// uuid4 is a random version 4 UUID.
func (g *generator) uuid4() string { return formatUUID(g.r.Uint64(), g.r.Uint64(), 4) }

// uuid7 is a version 7 UUID (time-ordered) at the clock.
func (g *generator) uuid7() string {
	hi := uint64(g.ms())<<16 | g.r.Uint64()&0xffff
	return formatUUID(hi, g.r.Uint64(), 7)
}

func formatUUID(hi, lo uint64, version uint64) string {
	hi = hi&^0xf000 | version<<12
	lo = lo&^(0xc<<60) | 0x8<<60
	var b [16]byte
	for i := range 8 {
		b[i] = byte(hi >> (56 - 8*i))
		b[8+i] = byte(lo >> (56 - 8*i))
	}
	var s [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(s[:])
}

// conversation is the shape every source shares: n messages (as the adapter counts them) in
// turns of a user prompt, up to four assistant replies that call tools (each followed by the
// results), and a final reply. The dialect writes each part in its format.
type dialect interface {
	user(text []byte)
	step(text []byte, calls []toolCall)
	final(text []byte)
}

// toolKind is what a tool call does; each dialect names the tool and its arguments.
type toolKind int

const (
	kindShell toolKind = iota
	kindRead
	kindEdit
	kindGrep
	kindWrite
	kindSpawn // start a subagent (only when the dialect asks for one)
)

// toolCall is one call and its result.
type toolCall struct {
	kind   toolKind
	id     string
	cmd    string // the shell command, or the pattern
	path   string
	old    string // edit: the replaced and the new text
	new    string
	result []byte
	isErr  bool
	// child is the session a spawning call started.
	child string
}

// conversation writes n messages through d. spawn, when set, turns the first call of the first
// step into a subagent spawn (it fills the call's child).
func (g *generator) conversation(d dialect, n int, cwd string, newID func() string, spawn func(*toolCall)) {
	for left := n; left > 0; {
		g.tick(20 * time.Minute)
		g.scratch[0] = g.text(g.scratch[0][:0], g.size(90, 12, 4000), true)
		d.user(g.scratch[0])
		g.st.Messages++
		left--
		if left == 0 {
			break
		}
		steps := min(g.r.IntN(5), left-1)
		for range steps {
			calls := g.calls(cwd, newID)
			if spawn != nil {
				spawn(&calls[0])
				spawn = nil
			}
			g.tick(40 * time.Second)
			g.scratch[0] = g.scratch[0][:0]
			if g.r.IntN(10) < 7 {
				g.scratch[0] = g.text(g.scratch[0], g.size(70, 20, 2000), true)
			}
			d.step(g.scratch[0], calls)
			g.st.Messages++
			g.st.ToolCalls += int64(len(calls))
			left--
		}
		g.tick(60 * time.Second)
		g.scratch[0] = g.text(g.scratch[0][:0], g.size(300, 40, 9000), true)
		d.final(g.scratch[0])
		g.st.Messages++
		left--
	}
}

// calls draws one to three tool calls with their results.
func (g *generator) calls(cwd string, newID func() string) []toolCall {
	n := 1
	if g.r.IntN(10) < 3 {
		n += 1 + g.r.IntN(2)
	}
	out := make([]toolCall, n)
	for i := range out {
		c := &out[i]
		c.id = newID()
		dir := string(g.words(nil, 1, ""))
		file := dir + "/" + string(g.words(nil, 1, "_")) + ".go"
		c.path = cwd + "/" + file
		switch k := g.r.IntN(20); {
		case k < 10:
			c.kind = kindShell
			c.cmd = g.command(dir, file)
		case k < 15:
			c.kind = kindRead
		case k < 17:
			c.kind = kindEdit
			c.old = string(g.words(nil, 3+g.r.IntN(8), " "))
			c.new = string(g.words(nil, 3+g.r.IntN(8), " "))
		case k < 19:
			c.kind = kindGrep
			c.cmd = string(g.words(nil, 1, ""))
			c.path = cwd + "/" + dir
		default:
			c.kind = kindWrite
			c.new = string(g.words(nil, 5+g.r.IntN(20), " "))
		}
		c.isErr = g.r.IntN(20) == 0
		res := g.scratch[1][:0]
		if c.isErr {
			res = append(res, "Error: "...)
		}
		res = g.text(res, g.size(170, 10, 24000), true)
		g.scratch[1] = res
		c.result = slices.Clone(res)
	}
	return out
}

func (g *generator) command(dir, file string) string {
	switch g.r.IntN(6) {
	case 0:
		return "go test ./" + dir + "/..."
	case 1:
		return "rg -n " + string(g.words(nil, 1, "")) + " " + dir
	case 2:
		return "git diff --stat " + dir
	case 3:
		return "sed -n '1,200p' " + file
	case 4:
		return "ls -la " + dir
	}
	return "make " + string(g.words(nil, 1, ""))
}

// title is a few words, for session names and labels.
func (g *generator) title() string {
	b := g.words(nil, 2+g.r.IntN(4), " ")
	if len(b) > 0 {
		b[0] -= 'a' - 'A'
	}
	return string(b)
}

// messages draws a session's length.
func (g *generator) messages() int { return 20 + g.r.IntN(181) }

// spawns decides whether a session starts a subagent: the first of each source does (so every
// corpus has some), then one in six.
func (g *generator) spawns(first bool) bool { return g.r.IntN(6) == 0 || first }

// childMessages draws a subagent session's length.
func (g *generator) childMessages() int { return 6 + g.r.IntN(25) }
