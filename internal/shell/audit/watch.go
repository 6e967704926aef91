package audit

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// WatchOptions configure Watch.
type WatchOptions struct {
	// Dir is the audit directory (<session_id>.jsonl files).
	Dir string
	// Session, if set, shows only that session.
	Session string
	// Follow keeps watching for new records and new sessions until ctx ends.
	Follow bool
	// Out receives the transcript.
	Out io.Writer
	// Err receives notes about unreadable lines and files; nil discards them.
	Err io.Writer
	// Ready, if set, is called once the records already on disk are printed and, with Follow,
	// new ones are being watched for.
	Ready func()
}

// maxPartial bounds the unterminated last line kept per file while following; a longer line
// is dropped (and reported) rather than held.
const maxPartial = 4 << 20

// Watch prints a readable transcript of the agent shells recorded in an audit directory: the
// records on disk ordered by time across files, then, with Follow, every new record as it is
// appended (new files included), until ctx ends. Following uses inotify on the directory.
func Watch(ctx context.Context, o WatchOptions) error {
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.Session != "" && (strings.ContainsAny(o.Session, "/\x00") || o.Session == "." || o.Session == "..") {
		return fmt.Errorf("--session-id %q is not a session id (an id names no directory; see `nexus mcp watch` for the ids)", o.Session)
	}
	if o.Session != "" {
		if err := knownSession(o.Dir, o.Session); err != nil {
			return err
		}
	}
	t := &tailer{dir: o.Dir, session: o.Session, files: map[string]*tailFile{}, errW: o.Err}
	tr := newTranscript()
	emit := func(recs []tailLine) error {
		sortLines(recs)
		var b strings.Builder
		for _, r := range recs {
			b.WriteString(tr.format(r.rec))
		}
		if b.Len() == 0 {
			return nil
		}
		_, err := io.WriteString(o.Out, b.String())
		return err
	}
	if !o.Follow {
		recs, err := t.scan(true)
		if err != nil {
			return err
		}
		if err := emit(recs); err != nil {
			return err
		}
		if o.Ready != nil {
			o.Ready()
		}
		return nil
	}

	if err := fsutil.MkdirPrivate(o.Dir); err != nil {
		return fmt.Errorf("audit directory: %w", err)
	}
	// Appends, new files and files moved in, and the directory's own removal.
	in, err := newInotify(o.Dir, unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	// The watch is in place before the first scan, so nothing appended in between is missed
	// (offsets make a second look at the same bytes harmless).
	recs, err := t.scan(false)
	if err != nil {
		return err
	}
	if err := emit(recs); err != nil {
		return err
	}
	if o.Ready != nil {
		o.Ready()
	}

	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			_ = in.SetReadDeadline(time.Unix(1, 0))
		case <-stop:
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", o.Dir, err)
		}
		names, rescan, gone := parseEvents(buf[:n])
		if gone {
			return fmt.Errorf("watch %s: the audit directory was removed or moved", o.Dir)
		}
		var recs []tailLine
		if rescan {
			recs, err = t.scan(false)
			if err != nil {
				return err
			}
		} else {
			for _, name := range names {
				if t.wants(name) {
					recs = append(recs, t.read(name, false)...)
				}
			}
		}
		if err := emit(recs); err != nil {
			return err
		}
	}
}

// maxListed bounds the session ids an unknown-session error lists.
const maxListed = 10

// LogInfo is one shell's audit log in the audit directory.
type LogInfo struct {
	ID       string    `json:"session_id"`
	Modified time.Time `json:"modified"`
}

// listLogs returns the audit directory's logs, newest first.
func listLogs(dir string) []LogInfo {
	ents, _ := os.ReadDir(dir)
	var ks []LogInfo
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !e.Type().IsRegular() || strings.HasPrefix(name, ".") {
			continue
		}
		var mod time.Time
		if info, err := e.Info(); err == nil {
			mod = info.ModTime()
		}
		ks = append(ks, LogInfo{name, mod})
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Modified.After(ks[j].Modified) })
	return ks
}

// Logs returns the shells whose audit logs the directory holds, newest first, at most limit.
func (r *Reader) Logs(limit int) []LogInfo {
	ks := listLogs(r.dir)
	return ks[:min(len(ks), limit)]
}

// knownSession fails, naming the sessions there are, when dir holds no audit log of id. A
// session's log is created when it opens, so an id without one is a typo or another
// directory's: following it would print nothing, forever.
func knownSession(dir, id string) error {
	fi, err := os.Lstat(filepath.Join(dir, id+".jsonl"))
	if err == nil && fi.Mode().IsRegular() {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("audit log of session %q: %w", id, err)
	}
	ks := listLogs(dir)
	if len(ks) == 0 {
		return fmt.Errorf("%w %q: the audit directory %s holds no session's log yet "+
			"(is it the directory `nexus mcp` writes to? see --audit-dir)", ErrUnknownSession, id, dir)
	}
	ids := make([]string, 0, min(len(ks), maxListed))
	for _, k := range ks[:min(len(ks), maxListed)] {
		ids = append(ids, k.ID)
	}
	more := ""
	if len(ks) > maxListed {
		more = fmt.Sprintf(" and %d more", len(ks)-maxListed)
	}
	return fmt.Errorf("%w %q: no audit log of it in %s; sessions there, newest first: %s%s "+
		"(`nexus mcp watch` without a session shows them all, each line tagged [session id])",
		ErrUnknownSession, id, dir, strings.Join(ids, ", "), more)
}

// parseEvents returns the file names of a buffer of inotify events, whether the kernel's
// queue overflowed (every file must be rescanned) and whether the directory itself went away.
func parseEvents(b []byte) (names []string, rescan, gone bool) {
	for len(b) >= unix.SizeofInotifyEvent {
		// struct inotify_event { int wd; uint32_t mask, cookie, len; char name[]; }
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := binary.NativeEndian.Uint32(b[12:16])
		end := unix.SizeofInotifyEvent + int(nameLen)
		if end > len(b) {
			break
		}
		name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00"))
		b = b[end:]
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			rescan = true
		case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			gone = true
		case name != "":
			names = append(names, name)
		}
	}
	return names, rescan, gone
}

// tailLine is one parsed record with where it came from, for a stable order.
type tailLine struct {
	rec  Record
	at   time.Time
	file string
	seq  int
}

// sortLines orders records by time, then by file and position for equal times.
func sortLines(ls []tailLine) {
	sort.SliceStable(ls, func(i, j int) bool {
		if !ls[i].at.Equal(ls[j].at) {
			return ls[i].at.Before(ls[j].at)
		}
		if ls[i].file != ls[j].file {
			return ls[i].file < ls[j].file
		}
		return ls[i].seq < ls[j].seq
	})
}

// tailer reads the new complete lines of the audit files.
type tailer struct {
	dir     string
	session string
	files   map[string]*tailFile
	errW    io.Writer
}

type tailFile struct {
	off     int64
	partial []byte
	seq     int
}

func (t *tailer) wants(name string) bool {
	if !strings.HasSuffix(name, ".jsonl") || strings.HasPrefix(name, ".") || strings.ContainsRune(name, '/') {
		return false
	}
	return t.session == "" || name == t.session+".jsonl"
}

// scan reads every audit file of the directory. final also parses an unterminated last line
// (when not following, a line still being written is as complete as it will get).
func (t *tailer) scan(final bool) ([]tailLine, error) {
	ents, err := os.ReadDir(t.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	var out []tailLine
	for _, e := range ents {
		if e.Type().IsRegular() && t.wants(e.Name()) {
			out = append(out, t.read(e.Name(), final)...)
		}
	}
	return out, nil
}

// read returns the records appended to name since the last read.
func (t *tailer) read(name string, final bool) []tailLine {
	tf := t.files[name]
	if tf == nil {
		tf = &tailFile{}
		t.files[name] = tf
	}
	path := filepath.Join(t.dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0) //nolint:gosec // G304: a file of the operator's audit directory
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(t.errW, "nexus: audit file %s: %v\n", name, err)
		}
		return nil
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	if fi.Size() < tf.off {
		// Truncated or replaced: start over.
		tf.off, tf.partial = 0, nil
	}
	if fi.Size() == tf.off && !final {
		return nil
	}
	if _, err := f.Seek(tf.off, io.SeekStart); err != nil {
		fmt.Fprintf(t.errW, "nexus: audit file %s: %v\n", name, err)
		return nil
	}
	data, err := io.ReadAll(f)
	tf.off += int64(len(data))
	if err != nil {
		fmt.Fprintf(t.errW, "nexus: audit file %s: %v\n", name, err)
	}
	data = append(tf.partial, data...)
	tf.partial = nil
	var out []tailLine
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if l, ok := t.parse(name, data[:i], tf); ok {
			out = append(out, l)
		}
		data = data[i+1:]
	}
	switch {
	case len(data) == 0:
	case final:
		if l, ok := t.parse(name, data, tf); ok {
			out = append(out, l)
		}
	case len(data) > maxPartial:
		fmt.Fprintf(t.errW, "nexus: audit file %s: dropped an unterminated line longer than %d bytes\n", name, maxPartial)
	default:
		tf.partial = append([]byte(nil), data...)
	}
	return out
}

func (t *tailer) parse(name string, line []byte, tf *tailFile) (tailLine, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return tailLine{}, false
	}
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		fmt.Fprintf(t.errW, "nexus: audit file %s: skipped a line that is not an audit record: %v\n", name, err)
		return tailLine{}, false
	}
	if r.SessionID == "" {
		r.SessionID = strings.TrimSuffix(name, ".jsonl")
	}
	at, _ := time.Parse(time.RFC3339Nano, r.Time)
	tf.seq++
	return tailLine{rec: r, at: at, file: name, seq: tf.seq}, true
}

// transcript formats audit records as a terminal transcript. It remembers each session's
// working directory, so a command is shown with the directory it ran in (an exec record holds
// the directory after the command).
type transcript struct {
	cwd map[string]string
}

// newTranscript returns a formatter that has seen no records yet.
func newTranscript() *transcript { return &transcript{cwd: map[string]string{}} }

var ruleRE = regexp.MustCompile(`rule ("(?:[^"\\]|\\.)*")`)

// format renders one record as one or more lines, each ending in a newline:
//
//	[<session_id>] [opened local] <cwd>
//	[<session_id>] <cwd> $ <command>
//	<stdout lines>
//	[stderr] <stderr lines>
//	→ exit <code> (<duration> ms) [timed out] [truncated]
//	→ [blocked: <rule>]
//	[<session_id>] [closed: <reason>]
func (t *transcript) format(r Record) string {
	var b strings.Builder
	id := "[" + oneLine(r.SessionID) + "] "
	switch r.Event {
	case "open":
		if r.Cwd != "" {
			t.cwd[r.SessionID] = r.Cwd
		}
		fmt.Fprintf(&b, "%s[opened %s]", id, oneLine(orDefault(r.Transport, "session")))
		if r.Cwd != "" {
			b.WriteString(" " + oneLine(r.Cwd))
		}
		var extra []string
		if r.Workspace != "" {
			extra = append(extra, "workspace "+oneLine(r.Workspace))
		}
		if len(r.Allow) > 0 {
			extra = append(extra, "allow: "+oneLine(strings.Join(r.Allow, " ")))
		}
		if len(r.Deny) > 0 {
			extra = append(extra, "deny: "+oneLine(strings.Join(r.Deny, " ")))
		}
		if len(extra) > 0 {
			b.WriteString(" (" + strings.Join(extra, "; ") + ")")
		}
		b.WriteByte('\n')
	case "exec":
		t.prompt(&b, id, r)
		if r.Stdout != "" {
			lines(&b, "", r.Stdout)
		}
		if r.Stderr != "" {
			lines(&b, "[stderr] ", r.Stderr)
		}
		code := "?"
		if r.ExitCode != nil {
			code = strconv.Itoa(*r.ExitCode)
		}
		fmt.Fprintf(&b, "→ exit %s (%d ms)", code, r.DurationMS)
		if r.TimedOut {
			b.WriteString(" [timed out]")
		}
		if r.Truncated {
			b.WriteString(" [truncated]")
		}
		b.WriteByte('\n')
		if r.Cwd != "" {
			t.cwd[r.SessionID] = r.Cwd
		}
	case "block":
		t.prompt(&b, id, r)
		fmt.Fprintf(&b, "→ [blocked: %s]\n", oneLine(blockRule(r.Reason)))
	case "close":
		fmt.Fprintf(&b, "%s[closed: %s]\n", id, oneLine(orDefault(r.Reason, "closed")))
		delete(t.cwd, r.SessionID)
	case "checkpoint":
		fmt.Fprintf(&b, "%s[checkpoint %s", id, oneLine(shortID(r.Checkpoint)))
		if r.Reason != "" {
			b.WriteString(": " + oneLine(r.Reason))
		}
		b.WriteString("]\n")
	case "restore":
		fmt.Fprintf(&b, "%s[restored checkpoint %s]\n", id, oneLine(shortID(r.Checkpoint)))
	case "checkpoint-error":
		fmt.Fprintf(&b, "%s[automatic checkpoint failed: %s]\n", id, oneLine(r.Reason))
	default:
		fmt.Fprintf(&b, "%s[%s", id, oneLine(orDefault(r.Event, "unknown event")))
		if r.Reason != "" {
			b.WriteString(": " + oneLine(r.Reason))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// prompt writes "[id] <cwd> $ <command>", continuation lines of the command prefixed "> ".
func (t *transcript) prompt(b *strings.Builder, id string, r Record) {
	cwd, ok := t.cwd[r.SessionID]
	if !ok {
		cwd = r.Cwd
	}
	b.WriteString(id)
	if cwd != "" {
		b.WriteString(oneLine(cwd) + " ")
	}
	b.WriteString("$ ")
	cmd := strings.TrimRight(r.Command, "\n")
	for i, l := range strings.Split(cmd, "\n") {
		if i > 0 {
			b.WriteString("> ")
		}
		b.WriteString(printable(l))
		b.WriteByte('\n')
	}
}

// blockRule extracts the rule from a refusal ("blocked by policy rule "deny: rm": ...").
func blockRule(reason string) string {
	if m := ruleRE.FindStringSubmatch(reason); m != nil {
		if s, err := strconv.Unquote(m[1]); err == nil {
			return s
		}
	}
	return orDefault(reason, "policy")
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// lines writes text line by line with a prefix, ending in a newline.
func lines(b *strings.Builder, prefix, text string) {
	for l := range strings.Lines(text) {
		b.WriteString(prefix)
		b.WriteString(printable(strings.TrimSuffix(l, "\n")))
		b.WriteByte('\n')
	}
}

// oneLine is printable with newlines escaped too.
func oneLine(s string) string {
	return printable(strings.ReplaceAll(strings.ReplaceAll(s, "\r", `\r`), "\n", `\n`))
}

// printable escapes control characters (other than tab) and invalid UTF-8, so a record can
// never move the watcher's cursor, change its colors or retitle its terminal.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if isControl(r) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isControl(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func isControl(r rune) bool {
	return (r < 0x20 && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029'
}
