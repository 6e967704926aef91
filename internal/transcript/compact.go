package transcript

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// Upstream compaction defaults (pi's DEFAULT_COMPACTION_SETTINGS).
const (
	DefaultReserveTokens    = 16384
	DefaultKeepRecentTokens = 20000
)

// Errors of compaction.
var (
	// ErrToolCallPending is returned while the last assistant message waits
	// for tool results: compacting then would separate calls from results.
	ErrToolCallPending = errors.New("transcript: a tool call is unanswered, not compacting now")
	// ErrAlreadyCompacted is returned when the leaf is a compaction entry.
	ErrAlreadyCompacted = errors.New("transcript: already compacted")
	// ErrNothingToCompact is returned when no message would leave the context.
	ErrNothingToCompact = errors.New("transcript: nothing to compact")
)

// utf16Len is JavaScript's String.prototype.length: pi's estimates count
// UTF-16 code units.
func utf16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
		if r > 0xFFFF {
			n++
		}
	}
	return n
}

type estBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Name      string          `json:"name"`
	ID        string          `json:"id"`
	Arguments json.RawMessage `json:"arguments"`
}

type estMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Command    string          `json:"command"`
	Output     string          `json:"output"`
	Summary    string          `json:"summary"`
	ToolCallID string          `json:"toolCallId"`
	StopReason string          `json:"stopReason"`
	Usage      *usageJSON      `json:"usage"`
}

type usageJSON struct {
	Input       float64 `json:"input"`
	Output      float64 `json:"output"`
	CacheRead   float64 `json:"cacheRead"`
	CacheWrite  float64 `json:"cacheWrite"`
	TotalTokens float64 `json:"totalTokens"`
}

// tokens is pi's calculateContextTokens: totalTokens, or the sum of the parts
// for old files without it.
func (u *usageJSON) tokens() int {
	if u.TotalTokens != 0 {
		return int(u.TotalTokens)
	}
	return int(u.Input + u.Output + u.CacheRead + u.CacheWrite)
}

func (m *estMessage) blocks() []estBlock {
	if len(m.Content) == 0 || m.Content[0] != '[' {
		return nil
	}
	var b []estBlock
	if json.Unmarshal(m.Content, &b) != nil {
		return nil
	}
	return b
}

func (m *estMessage) contentString() (string, bool) {
	if len(m.Content) == 0 || m.Content[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(m.Content, &s) != nil {
		return "", false
	}
	return s, true
}

// estimate is pi's estimateTokens for a decoded message.
func (m *estMessage) estimate() int {
	chars := 0
	switch m.Role {
	case "user":
		if s, ok := m.contentString(); ok {
			chars = utf16Len(s)
		}
		for _, b := range m.blocks() {
			if b.Type == "text" {
				chars += utf16Len(b.Text)
			}
		}
	case "assistant":
		for _, b := range m.blocks() {
			switch b.Type {
			case "text":
				chars += utf16Len(b.Text)
			case "thinking":
				chars += utf16Len(b.Thinking)
			case "toolCall":
				// JSON.stringify(arguments): the stored arguments are that text
				// already when pi wrote them.
				chars += utf16Len(b.Name) + utf16Len(compactJSON(b.Arguments))
			}
		}
	case "custom", "toolResult":
		if s, ok := m.contentString(); ok {
			chars = utf16Len(s)
		}
		for _, b := range m.blocks() {
			switch b.Type {
			case "text":
				chars += utf16Len(b.Text)
			case "image":
				chars += 4800 // pi counts an image as 4800 characters (1200 tokens)
			}
		}
	case "bashExecution":
		chars = utf16Len(m.Command) + utf16Len(m.Output)
	case "branchSummary", "compactionSummary":
		chars = utf16Len(m.Summary)
	default:
		return 0
	}
	return (chars + 3) / 4
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	b, err := encodeJSON(raw)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// usage returns the usage of an assistant message that counts for the
// context size (pi skips aborted and error messages).
func (m *estMessage) usage() (int, bool) {
	if m.Role != "assistant" || m.Usage == nil || m.StopReason == "aborted" || m.StopReason == "error" {
		return 0, false
	}
	return m.Usage.tokens(), true
}

// EstimateTokens estimates the tokens of an agent message like pi: the
// characters (UTF-16 units) of its text, thinking, tool calls (name and
// arguments), command and output or summary, divided by 4 and rounded up;
// an image counts 1200 tokens. Unknown roles count 0.
func EstimateTokens(msg json.RawMessage) int {
	var m estMessage
	if json.Unmarshal(msg, &m) != nil {
		return 0
	}
	return m.estimate()
}

// ContextEstimate is the size of a context as pi's estimateContextTokens
// computes it.
type ContextEstimate struct {
	// Tokens is UsageTokens + TrailingTokens.
	Tokens int
	// UsageTokens is the context size the provider reported with the last
	// assistant message that has usage (not aborted, not an error).
	UsageTokens int
	// TrailingTokens is the estimate of the messages after that one (of
	// all messages when none has usage).
	TrailingTokens int
	// LastUsageIndex is the index of that message, -1 when none.
	LastUsageIndex int
}

// EstimateContextTokens estimates the size of a context: the provider's
// count at the last assistant message with usage, plus an estimate of the
// messages after it.
func EstimateContextTokens(messages []json.RawMessage) ContextEstimate {
	est := ContextEstimate{LastUsageIndex: -1}
	for i := len(messages) - 1; i >= 0; i-- {
		var m estMessage
		if json.Unmarshal(messages[i], &m) != nil {
			continue
		}
		if u, ok := m.usage(); ok {
			est.UsageTokens, est.LastUsageIndex = u, i
			break
		}
	}
	for _, msg := range messages[est.LastUsageIndex+1:] {
		est.TrailingTokens += EstimateTokens(msg)
	}
	est.Tokens = est.UsageTokens + est.TrailingTokens
	return est
}

// ShouldCompact reports whether a context of contextTokens exceeds the
// model's window minus the reserve kept for the reply (pi's shouldCompact;
// upstream reserve DefaultReserveTokens).
func ShouldCompact(contextTokens, window, reserve int) bool {
	return contextTokens > window-reserve
}

// CompactionDetails is the details field pi writes on its compactions.
type CompactionDetails struct {
	ReadFiles     []string `json:"readFiles"`
	ModifiedFiles []string `json:"modifiedFiles"`
}

// Cut is a compaction plan: where the kept part of the context starts and
// what the summary must cover (pi's prepareCompaction).
type Cut struct {
	// FirstKeptEntryID is the first entry the context keeps after the
	// summary: the firstKeptEntryId of the compaction entry.
	FirstKeptEntryID string
	// IsSplitTurn is true when the cut falls inside a turn (at an
	// assistant message); TurnStartID is then the entry that started it.
	IsSplitTurn bool
	TurnStartID string
	// TokensBefore is the estimated context size before compacting.
	TokensBefore int
	// PreviousSummary is the summary of the last compaction on the path.
	PreviousSummary string
	// SummarizeIDs are the entries whose messages the summary replaces (in
	// path order); TurnPrefixIDs, for a split turn, the start of the turn
	// that is cut (pi summarizes it separately).
	SummarizeIDs  []string
	TurnPrefixIDs []string
	// ReadFiles and ModifiedFiles are collected from read/write/edit tool
	// calls in the summarized part and the previous compaction, as pi does.
	ReadFiles     []string
	ModifiedFiles []string
}

// Details returns the details pi writes with a compaction for this cut.
func (c Cut) Details() CompactionDetails {
	d := CompactionDetails{ReadFiles: c.ReadFiles, ModifiedFiles: c.ModifiedFiles}
	if d.ReadFiles == nil {
		d.ReadFiles = []string{}
	}
	if d.ModifiedFiles == nil {
		d.ModifiedFiles = []string{}
	}
	return d
}

// cutInfo is what the cut-point chooser needs of one path entry.
type cutInfo struct {
	e          *Entry
	role       string // message role, "" for other entry types
	tokens     int
	calls      []string // tool call ids of an assistant message
	result     string   // toolCallId of a toolResult
	stopReason string
	reads      []string
	writes     []string
}

func (c *cutInfo) isMessage() bool { return c.e.Type == "message" }

// userLike is a message the model sees as user input (pi's turn starts).
func (c *cutInfo) userLike() bool {
	if c.e.Type == "branch_summary" || c.e.Type == "custom_message" {
		return true
	}
	return c.isMessage() && (c.role == "user" || c.role == "bashExecution")
}

// validCut is pi's findValidCutPoints: never a tool result.
func (c *cutInfo) validCut() bool {
	if c.e.Type == "branch_summary" || c.e.Type == "custom_message" {
		return true
	}
	if !c.isMessage() {
		return false
	}
	switch c.role {
	case "bashExecution", "custom", "branchSummary", "compactionSummary", "user", "assistant":
		return true
	}
	return false
}

// producesMessage is pi's getMessageFromEntryForCompaction.
func (c *cutInfo) producesMessage() bool {
	switch c.e.Type {
	case "message", "custom_message", "branch_summary":
		return true
	}
	return false
}

func loadCutInfo(f *File, e *Entry) (cutInfo, error) {
	ci := cutInfo{e: e}
	if e.Type != "message" {
		return ci, nil
	}
	full, err := f.Full(e)
	if err != nil {
		return ci, err
	}
	var m estMessage
	if json.Unmarshal(full.Message, &m) != nil {
		return ci, nil
	}
	ci.role = m.Role
	ci.tokens = m.estimate()
	ci.result = m.ToolCallID
	ci.stopReason = m.StopReason
	if m.Role == "assistant" {
		for _, b := range m.blocks() {
			if b.Type != "toolCall" {
				continue
			}
			ci.calls = append(ci.calls, b.ID)
			var args struct {
				Path any `json:"path"`
			}
			if json.Unmarshal(b.Arguments, &args) != nil {
				continue
			}
			p, ok := args.Path.(string)
			if !ok || p == "" {
				continue
			}
			switch b.Name {
			case "read":
				ci.reads = append(ci.reads, p)
			case "write", "edit":
				ci.writes = append(ci.writes, p)
			}
		}
	}
	return ci, nil
}

// ChooseCut plans a summary compaction of the branch ending at leafID (""
// for the default leaf) keeping about keepRecentTokens of the newest
// messages, with pi's findCutPoint: walking back from the leaf it adds up
// the message estimates until the budget is reached and cuts at the nearest
// valid cut point at or after that message (a user, assistant, custom,
// bashExecution or summary message, never a tool result), then takes in the
// non-message entries just before it. Only the part after the previous
// compaction's first kept entry is considered.
//
// Two guards go beyond pi: ChooseCut fails with ErrToolCallPending while the
// last assistant message has unanswered tool calls (no user input since),
// and it moves the cut back to the assistant message of any tool call whose
// result would otherwise land after the cut, so a call and its result always
// stay on the same side.
func ChooseCut(f *File, leafID string, keepRecentTokens int) (Cut, error) {
	if leafID != "" && f.Entry(leafID) == nil {
		return Cut{}, fmt.Errorf("choose cut at %q: %w", leafID, ErrUnknownEntry)
	}
	path := f.Path(leafID)
	if len(path) == 0 {
		return Cut{}, ErrNothingToCompact
	}
	if path[len(path)-1].Type == "compaction" {
		return Cut{}, ErrAlreadyCompacted
	}
	var cut Cut
	prev, start := -1, 0
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type == "compaction" {
			prev = i
			break
		}
	}
	if prev >= 0 {
		cut.PreviousSummary = path[prev].Summary()
		start = prev + 1
		for i, e := range path {
			if e.ID != "" && e.ID == path[prev].FirstKeptEntryID() {
				start = i
				break
			}
		}
	}
	infos := make([]cutInfo, 0, len(path)-start)
	for _, e := range path[start:] {
		ci, err := loadCutInfo(f, e)
		if err != nil {
			return Cut{}, fmt.Errorf("choose cut: %w", err)
		}
		infos = append(infos, ci)
	}
	if pendingToolCall(infos) {
		return Cut{}, ErrToolCallPending
	}
	ctx, err := f.BuildContext(path[len(path)-1].ID)
	if err != nil {
		return Cut{}, fmt.Errorf("choose cut: %w", err)
	}
	cut.TokensBefore = EstimateContextTokens(ctx.Messages).Tokens

	idx := findCut(infos, keepRecentTokens)
	first := infos[idx].e
	if first.ID == "" {
		return Cut{}, fmt.Errorf("choose cut: first kept entry (line %d) has no id: %w", first.Line, ErrNothingToCompact)
	}
	cut.FirstKeptEntryID = first.ID
	historyEnd := idx
	if !infos[idx].isMessage() || infos[idx].role != "user" {
		// As pi: a cut at any other turn start (a bash execution, custom
		// message or branch summary) is a split turn with an empty prefix.
		for i := idx; i >= 0; i-- {
			if infos[i].userLike() {
				cut.IsSplitTurn = true
				cut.TurnStartID = infos[i].e.ID
				historyEnd = i
				break
			}
		}
	}
	reads, writes := map[string]bool{}, map[string]bool{}
	if prev >= 0 {
		if c, err := f.Full(path[prev]); err == nil {
			var fromHook bool
			_ = json.Unmarshal(fieldOf(c.Raw, "fromHook"), &fromHook)
			var d CompactionDetails
			if !fromHook && json.Unmarshal(c.Details(), &d) == nil {
				for _, p := range d.ReadFiles {
					reads[p] = true
				}
				for _, p := range d.ModifiedFiles {
					writes[p] = true
				}
			}
		}
	}
	collect := func(from, to int) []string {
		var ids []string
		for _, ci := range infos[from:to] {
			if !ci.producesMessage() {
				continue
			}
			ids = append(ids, ci.e.ID)
			for _, p := range ci.reads {
				reads[p] = true
			}
			for _, p := range ci.writes {
				writes[p] = true
			}
		}
		return ids
	}
	cut.SummarizeIDs = collect(0, historyEnd)
	if cut.IsSplitTurn {
		cut.TurnPrefixIDs = collect(historyEnd, idx)
	}
	for p := range writes {
		cut.ModifiedFiles = append(cut.ModifiedFiles, p)
	}
	for p := range reads {
		if !writes[p] {
			cut.ReadFiles = append(cut.ReadFiles, p)
		}
	}
	sort.Strings(cut.ModifiedFiles)
	sort.Strings(cut.ReadFiles)
	return cut, nil
}

// fieldOf returns the raw value of a top-level field of a JSON object.
func fieldOf(obj json.RawMessage, key string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return nil
	}
	return m[key]
}

// pendingToolCall reports whether the last assistant message has tool calls
// without results while nothing but results followed it: the agent is in
// the middle of running tools. Aborted and failed messages never get their
// tools run, so they do not count.
func pendingToolCall(infos []cutInfo) bool {
	last := -1
	for i := len(infos) - 1; i >= 0; i-- {
		if infos[i].isMessage() && infos[i].role == "assistant" {
			last = i
			break
		}
	}
	if last < 0 || len(infos[last].calls) == 0 || infos[last].stopReason == "aborted" || infos[last].stopReason == "error" {
		return false
	}
	// Counted by id: two calls of one reply may share one (see CheckToolPairing).
	open := map[string]int{}
	for _, id := range infos[last].calls {
		open[id]++
	}
	for _, ci := range infos[last+1:] {
		if ci.userLike() || (ci.isMessage() && ci.role == "custom") {
			return false
		}
		if ci.isMessage() && ci.role == "toolResult" && open[ci.result] > 0 {
			if open[ci.result]--; open[ci.result] == 0 {
				delete(open, ci.result)
			}
		}
	}
	return len(open) > 0
}

// findCut is pi's findCutPoint over infos (the path after the previous
// compaction), with the tool-result guard; it returns the index of the
// first kept entry.
func findCut(infos []cutInfo, keepRecentTokens int) int {
	var points []int
	for i := range infos {
		if infos[i].validCut() {
			points = append(points, i)
		}
	}
	if len(points) == 0 {
		return 0
	}
	cut := points[0]
	acc := 0
	for i := len(infos) - 1; i >= 0; i-- {
		if !infos[i].isMessage() {
			continue
		}
		acc += infos[i].tokens
		if acc >= keepRecentTokens {
			for _, p := range points {
				if p >= i {
					cut = p
					break
				}
			}
			break
		}
	}
	cut = keepToolPairs(infos, cut)
	for cut > 0 {
		prev := infos[cut-1]
		if prev.e.Type == "compaction" || prev.isMessage() {
			break
		}
		cut--
	}
	return cut
}

// keepToolPairs moves the cut back to the assistant message of any tool
// call before the cut whose result comes after it.
func keepToolPairs(infos []cutInfo, cut int) int {
	// A result's call is in the latest assistant message before it with a call of its id:
	// a model may use one id in two replies.
	callOf := make([]int, len(infos)) // result index -> its call's index, -1 for none
	lastAt := map[string]int{}
	for i, ci := range infos {
		callOf[i] = -1
		if ci.role == "toolResult" {
			if at, ok := lastAt[ci.result]; ok {
				callOf[i] = at
			}
		}
		for _, id := range ci.calls {
			lastAt[id] = i
		}
	}
	for {
		moved := cut
		for i := cut; i < len(infos); i++ {
			if at := callOf[i]; at >= 0 && at < moved {
				moved = at
			}
		}
		if moved == cut {
			return cut
		}
		cut = moved
	}
}

// SummaryMessages returns the agent messages of the entries ids (a Cut's
// SummarizeIDs or TurnPrefixIDs), as pi passes them to the summarizer:
// messages, custom messages and branch summaries.
func SummaryMessages(f *File, ids []string) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(ids))
	for _, id := range ids {
		e := f.Entry(id)
		if e == nil {
			return nil, fmt.Errorf("summary messages: %q: %w", id, ErrUnknownEntry)
		}
		full, err := f.Full(e)
		if err != nil {
			return nil, fmt.Errorf("summary messages: %w", err)
		}
		if m := f.message(full, nil); m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// Compact appends a compaction entry with summary at w's leaf, at the cut
// ChooseCut picks for keepRecentTokens. details nil means the cut's
// {readFiles, modifiedFiles}. It fails with ErrNothingToCompact when no
// message would leave the context and with ErrToolCallPending while tools
// run. The summary is the caller's (a model writes it from
// SummaryMessages of the cut; ChooseCut tells what it must cover).
func Compact(w *Writer, summary string, keepRecentTokens int, details any) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return "", ErrClosed
	}
	if w.leaf == "" {
		return "", ErrNothingToCompact
	}
	cut, err := ChooseCut(w.file, w.leaf, keepRecentTokens)
	if err != nil {
		return "", fmt.Errorf("compact %s: %w", w.path, err)
	}
	if len(cut.SummarizeIDs) == 0 && len(cut.TurnPrefixIDs) == 0 {
		return "", fmt.Errorf("compact %s: %w", w.path, ErrNothingToCompact)
	}
	if details == nil {
		details = cut.Details()
	}
	return w.appendCompactionLocked(summary, cut.FirstKeptEntryID, cut.TokensBefore, details, false)
}

// ArchiveName returns the archive path of path at now for kind (bak,
// reset, deleted): <path>.<kind>.<ISO timestamp with : replaced by ->, as
// OpenClaw names them (docs/conversations.md, sessions.json), e.g. x.jsonl.bak.2026-01-21T12-00-00.000Z.
func ArchiveName(path, kind string, now time.Time) string {
	return path + "." + kind + "." + strings.ReplaceAll(now.UTC().Format(timestampLayout), ":", "-")
}

// CompactLines is line compaction (OpenClaw's sessions.compact):
// it keeps the header and the last maxLines entries of the transcript at
// path and archives the original to ArchiveName(path, "bak", now). The archive is
// the original file itself (hard-linked, then the compacted file is renamed
// over path), so at every moment path holds either the whole original or
// the compacted file, and nothing is unlinked. It returns "" when the file
// has no more than maxLines entries (nothing to do).
//
// Kept lines are copied byte for byte; a v1/v2 file is written as v3 (its
// migrated entries and a header with version 3). Leading tool results are
// dropped from the kept lines, so the compacted file never starts with
// results whose calls were cut away; the first kept entry's parent is then
// unknown and it counts as a root. Unparseable lines are not kept.
//
// No Writer may have the file open: CompactLines takes the writer lock and
// fails with ErrLocked.
func CompactLines(path string, maxLines int, now time.Time) (string, error) {
	if maxLines < 1 {
		return "", fmt.Errorf("compact %s: maxLines %d, want at least 1", path, maxLines)
	}
	return rewrite(path, now, func(f *File) ([]*Entry, bool) {
		if len(f.Entries) <= maxLines {
			return nil, false
		}
		start := len(f.Entries) - maxLines
		for start < len(f.Entries) && f.Entries[start].Type == "message" && f.Entries[start].Role == "toolResult" {
			start++
		}
		return f.Entries[start:], true
	})
}

// Migrate rewrites a v1 or v2 transcript as v3 (the entries as the reader
// migrates them: ids, parents, firstKeptEntryId, custom roles) so a Writer
// can append to it. The original is archived like in CompactLines. It
// returns "" for a file that is already v3.
func Migrate(path string, now time.Time) (string, error) {
	return rewrite(path, now, func(f *File) ([]*Entry, bool) {
		if f.Header.Version >= CurrentVersion {
			return nil, false
		}
		return f.Entries, true
	})
}

// rewrite replaces the transcript at path with its header (as v3) and the
// entries keep selects, archiving the original.
func rewrite(path string, now time.Time, keep func(*File) ([]*Entry, bool)) (string, error) {
	lock, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0) // #nosec G304 G703 -- the caller names its transcript
	if err != nil {
		return "", fmt.Errorf("rewrite transcript %s: %w", path, noFollowErr(err))
	}
	defer func() { _ = unlockClose(lock) }()
	if err := lockFile(lock, path); err != nil {
		return "", err
	}
	if err := sameFile(lock, path); err != nil {
		return "", err
	}
	f, err := Open(path)
	if err != nil {
		return "", fmt.Errorf("rewrite transcript %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	if f.Header.Version > CurrentVersion {
		return "", fmt.Errorf("rewrite transcript %s: version %d is newer than %d", path, f.Header.Version, CurrentVersion)
	}
	entries, ok := keep(f)
	if !ok {
		return "", nil
	}
	header := f.Header.Raw
	if f.Header.Version < CurrentVersion {
		if header, err = patchObject(header, map[string]any{"version": CurrentVersion}); err != nil {
			return "", fmt.Errorf("rewrite transcript %s: header: %w", path, err)
		}
	}
	tmp, err := writeTemp(path, func(bw *bufio.Writer) error {
		if _, err := bw.Write(header); err != nil {
			return err
		}
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
		return f.writeLines(bw, entries)
	})
	if err != nil {
		return "", fmt.Errorf("rewrite transcript %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp) }()
	archive := ArchiveName(path, "bak", now)
	dir := filepath.Dir(path)
	if err := os.Link(path, archive); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("archive transcript %s: %s: %w", path, archive, fs.ErrExist)
		}
		// No hard links on this file system: rename instead, which leaves
		// path missing until the next rename.
		if _, serr := os.Lstat(archive); serr == nil {
			return "", fmt.Errorf("archive transcript %s: %s: %w", path, archive, fs.ErrExist)
		}
		if err := os.Rename(path, archive); err != nil {
			return "", fmt.Errorf("archive transcript %s: %w", path, err)
		}
	} else if err := fsutil.SyncDir(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("replace transcript %s: %w", path, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return "", err
	}
	return archive, nil
}
