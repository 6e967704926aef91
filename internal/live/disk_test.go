package live_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// These tests know the disk store's layout (state/live/<id>/: session.json, seq, segments
// named by their first sequence number, pinned.log): they damage it the ways a crash, a power
// loss or another local user could, and check what a restarted registry makes of it.

type diskRun struct {
	t    *testing.T
	dir  string
	clk  *livetest.FakeClock
	boot string
	log  *testkit.Buffer
	st   *live.DiskStore
	reg  *live.Registry
	kind *livetest.FakeKind
}

func newDiskRun(t *testing.T) *diskRun {
	return &diskRun{t: t, dir: filepath.Join(t.TempDir(), "live"), clk: livetest.NewFakeClock(), boot: "boot-1", log: &testkit.Buffer{}}
}

// start opens the store and a registry on it, as a gateway starting on the state directory.
func (d *diskRun) start(limits live.LogLimits) *live.Registry {
	d.t.Helper()
	logger := slog.New(slog.NewTextHandler(d.log, nil))
	boot := d.boot
	st, err := live.OpenDiskStore(d.dir, live.DiskOptions{SyncInterval: time.Hour, Logger: logger, BootID: func() string { return boot }})
	mustOK(d.t, err)
	d.st = st
	d.kind = livetest.NewFakeKind(abi.TypeTerminal, false)
	d.reg = newRegistry(d.t, live.Config{Store: st, Now: d.clk.Now, NewID: livetest.SeqIDs(), Log: limits, IdleTimeout: -1, Logger: logger}, d.kind)
	return d.reg
}

// kill leaves the files as a kill -9 would.
func (d *diskRun) kill() {
	d.t.Helper()
	mustOK(d.t, d.st.Close())
}

func (d *diskRun) create() string {
	d.t.Helper()
	s, err := d.reg.Create(context.Background(), abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	mustOK(d.t, err)
	return s.SessionID
}

func (d *diskRun) emit(id string, chunks ...string) {
	d.t.Helper()
	for _, c := range chunks {
		d.kind.Instance(id).Emit([]byte(c))
	}
}

func (d *diskRun) segments(id string) []string {
	d.t.Helper()
	m, err := filepath.Glob(filepath.Join(d.dir, id, "0*.log"))
	mustOK(d.t, err)
	sort.Strings(m)
	return m
}

func (d *diskRun) events(id string) []*live.Event {
	d.t.Helper()
	b, err := d.reg.Read(context.Background(), id, 0, 0, 0)
	mustOK(d.t, err)
	return b.Events
}

func describe(es []*live.Event) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%d:%s", e.Seq, livetest.Describe(e)))
	}
	return strings.Join(out, " ")
}

var bigLog = live.LogLimits{Events: 8192, Bytes: 8 << 20, Pinned: 1024}

// TestDiskTornLastRecord: a record a crash cut short (a write in progress when the process
// died, or a tail the disk never got) is dropped, whatever follows it in the file, and the
// numbering goes on after the last whole record — which is the last any reader could have
// seen, since events are written before they are shown.
func TestDiskTornLastRecord(t *testing.T) {
	for _, damage := range []struct {
		name string
		fn   func(t *testing.T, path string)
	}{
		{"cut inside the record", func(t *testing.T, path string) { truncateBy(t, path, 3) }},
		{"cut inside the header", func(t *testing.T, path string) { truncateTo(t, path, lastFrame(t, path)+5) }},
		{"garbage after it", func(t *testing.T, path string) { appendBytes(t, path, []byte("\x00\x00\x01\x00garbage")) }},
		{"a flipped bit", func(t *testing.T, path string) { flipLastByte(t, path) }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			d := newDiskRun(t)
			d.start(bigLog)
			id := d.create()
			d.emit(id, "one", "two", "tail")
			before := d.events(id)
			d.kill()
			segs := d.segments(id)
			damage.fn(t, segs[len(segs)-1])

			d.start(bigLog)
			got := d.events(id)
			keep := len(before)
			if damage.name != "garbage after it" {
				keep-- // "tail" is gone
			}
			if describe(got[:keep]) != describe(before[:keep]) {
				t.Fatalf("after the restart:\n %s\nwant it to start\n %s", describe(got), describe(before[:keep]))
			}
			last := before[keep-1].Seq
			if tl := describe(got[keep:]); tl != fmt.Sprintf("%d:status:closed/closed %d:close:gateway-restart/closed", last+1, last+2) {
				t.Errorf("closing events %s (after %d)", tl, last)
			}
			// A third run reads the same: the damaged record stays dropped, the new ones stay.
			d.kill()
			d.start(bigLog)
			if again := d.events(id); describe(again) != describe(got) {
				t.Errorf("second restart:\n %s\n %s", describe(again), describe(got))
			}
		})
	}
}

// TestDiskEmptySegment: a segment created just before a crash, with nothing (whole) in it, is
// dropped, and does not stand in the way of the next.
func TestDiskEmptySegment(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	id := d.create()
	d.emit(id, "x")
	last, err := d.reg.LastSeq(context.Background(), id)
	mustOK(t, err)
	d.kill()
	empty := filepath.Join(d.dir, id, fmt.Sprintf("%020d.log", last+1))
	mustOK(t, os.WriteFile(empty, []byte{7, 0}, 0o600))

	d.start(bigLog)
	es := d.events(id)
	if tl := livetest.Describe(es[len(es)-1]); tl != "close:gateway-restart/closed" || es[len(es)-1].Seq != last+2 {
		t.Fatalf("events %s", describe(es))
	}
}

// TestDiskReboot: after a reboot (another boot id), a session continues after every number it
// may have handed out, not after the last one that reached the disk: the page cache that held
// the rest is gone, and readers may have seen them. The gap reads as EVENTS_MISSED.
func TestDiskReboot(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	id := d.create()
	d.emit(id, "a", "b")
	last, err := d.reg.LastSeq(context.Background(), id)
	mustOK(t, err)
	d.kill()
	d.boot = "boot-2"

	d.start(bigLog)
	es := d.events(id)
	n := len(es)
	if n < 2 || es[n-1].Seq <= last+2 || es[n-2].Seq != es[n-1].Seq-1 {
		t.Fatalf("after a reboot: %s (last before: %d)", describe(es), last)
	}
	jump := es[n-2].Seq
	b, err := d.reg.Read(context.Background(), id, last, 0, 0)
	mustOK(t, err)
	if len(b.Events) != 3 || livetest.MissedOf(t, b.Events[0]) != jump-last-1 {
		t.Errorf("a reader that had everything up to %d gets %s", last, describe(b.Events))
	}

	// Once the numbers pass a reserved block, the next reservation is on disk before they are
	// used: a reboot then still continues after them.
	d.kill()
	d.start(live.LogLimits{Events: 1024, Bytes: 1 << 20, Pinned: 16})
	id2 := d.create()
	for i := range 70_000 {
		d.emit(id2, fmt.Sprint(i%10))
	}
	last2, err := d.reg.LastSeq(context.Background(), id2)
	mustOK(t, err)
	d.kill()
	d.boot = "boot-3"
	d.start(bigLog)
	if got, err := d.reg.LastSeq(context.Background(), id2); err != nil || got <= last2+2 {
		t.Errorf("LastSeq after a reboot %d (%v), before %d: numbers past the first block must not be reused", got, err, last2)
	}
}

// TestDiskBounds: a session's files hold the in-memory window, one segment more and the pins,
// whatever went through it.
func TestDiskBounds(t *testing.T) {
	d := newDiskRun(t)
	limits := live.LogLimits{Events: 400, Bytes: 64 << 10, Pinned: 8}
	d.start(limits)
	id := d.create()
	chunk := strings.Repeat("z", 1000)
	for i := range 5000 { // 5 MB through a 64 KiB window
		d.emit(id, chunk)
		if i%100 == 0 {
			d.kind.Instance(id).SetMetadata(map[string]any{"i": i})
		}
	}
	var total int64
	mustOK(t, filepath.WalkDir(filepath.Join(d.dir, id), func(_ string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		fi, err := de.Info()
		total += fi.Size()
		return err
	}))
	// The window (64 KiB of output plus framing), a quarter of it in the open segment, and 2x
	// the pins in pinned.log.
	if limit := int64(64<<10)*5/4 + 64<<10 + 16*512; total > limit {
		t.Errorf("%d bytes on disk for a %d-byte window (limit %d)", total, 64<<10, limit)
	}
	if n := len(d.segments(id)); n > 6 {
		t.Errorf("%d segments", n)
	}
	before := d.events(id)
	d.kill()
	d.start(limits)
	after := d.events(id)
	// The two closing events push the two oldest data events out of the window.
	k := len(before) - 20
	if got, want := describe(after[len(after)-2-k:len(after)-2]), describe(before[len(before)-k:]); got != want {
		t.Errorf("window after the restart differs:\n %s\n %s", got, want)
	}
}

// TestDiskRetentionRemovesFiles: a session past its retention leaves no file behind.
func TestDiskRetentionRemovesFiles(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	id := d.create()
	_, err := d.reg.Close(context.Background(), id, abi.CloseRequested)
	mustOK(t, err)
	d.reg.Sweep(context.Background(), livetest.T0.Add(2*time.Hour))
	if _, err := os.Lstat(filepath.Join(d.dir, id)); !os.IsNotExist(err) {
		t.Errorf("session directory after retention: %v", err)
	}
}

// TestDiskPermissions: the store is private: 0700 directories, 0600 files.
func TestDiskPermissions(t *testing.T) {
	d := newDiskRun(t)
	d.start(live.LogLimits{Events: 4, Bytes: 1 << 20, Pinned: 2})
	id := d.create()
	for i := range 50 {
		d.emit(id, "x")
		if i%5 == 0 {
			d.kind.Instance(id).SetMetadata(map[string]any{"i": i})
		}
	}
	_, err := d.reg.Close(context.Background(), id, abi.CloseRequested)
	mustOK(t, err)
	mustOK(t, d.st.Sync())
	n := 0
	mustOK(t, filepath.WalkDir(d.dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if de.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		}
		n++
		return nil
	}))
	if n < 5 { // the store, the session, its record, seq, a segment, pinned.log
		t.Errorf("only %d entries checked", n)
	}
}

// TestDiskHostileEntries: what another local user (or a crash) could leave in the store is never
// followed or trusted: symlinks, a session directory whose record does not parse or names
// another session, a segment that is a symlink. The rest is restored.
func TestDiskHostileEntries(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	good := d.create()
	d.emit(good, "fine")
	victim := d.create()
	d.kill()

	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	mustOK(t, os.WriteFile(secret, []byte("do not read"), 0o600))
	// A symlink in place of a session directory, of a record, of a segment.
	mustOK(t, os.Symlink(outside, filepath.Join(d.dir, "sess-0900")))
	mustOK(t, os.Remove(filepath.Join(d.dir, victim, "session.json")))
	mustOK(t, os.Symlink(secret, filepath.Join(d.dir, victim, "session.json")))
	mustOK(t, os.Symlink(secret, filepath.Join(d.dir, good, fmt.Sprintf("%020d.log", 100))))
	// A record that does not parse; one that names another session.
	for name, rec := range map[string]string{"sess-0901": "{not json", "sess-0902": `{"sessionId":"sess-0001","status":"active"}`} {
		mustOK(t, os.Mkdir(filepath.Join(d.dir, name), 0o700))
		mustOK(t, os.WriteFile(filepath.Join(d.dir, name, "session.json"), []byte(rec), 0o600))
	}

	d.start(bigLog)
	all, err := d.reg.List(context.Background(), true)
	mustOK(t, err)
	if len(all) != 1 || all[0].SessionID != good {
		t.Fatalf("restored %+v, want only %s", all, good)
	}
	if es := d.events(good); !strings.Contains(describe(es), "data:fine") {
		t.Errorf("good session's events %s", describe(es))
	}
	if s := d.log.String(); !strings.Contains(s, "sess-0900") || !strings.Contains(s, "sess-0901") || !strings.Contains(s, "sess-0902") || !strings.Contains(s, victim) {
		t.Errorf("the log does not name what was left alone:\n%s", s)
	}
	if b, _ := os.ReadFile(secret); string(b) != "do not read" {
		t.Errorf("a file outside the store was changed: %q", b)
	}
	// New sessions still go where they should, never through the symlinks.
	fresh := d.create()
	if fi, err := os.Lstat(filepath.Join(d.dir, fresh)); err != nil || !fi.IsDir() {
		t.Errorf("new session directory: %v", err)
	}
}

// TestDiskStoreRefusesSymlinkedDir: the store's own directory must not be a symlink.
func TestDiskStoreRefusesSymlinkedDir(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "live")
	mustOK(t, os.Symlink(real, link))
	if _, err := live.OpenDiskStore(link, live.DiskOptions{}); err == nil {
		t.Fatal("a symlinked store directory was accepted")
	}
}

func truncateBy(t *testing.T, path string, n int64) {
	t.Helper()
	fi, err := os.Stat(path)
	mustOK(t, err)
	mustOK(t, os.Truncate(path, fi.Size()-n))
}

func truncateTo(t *testing.T, path string, size int64) {
	t.Helper()
	mustOK(t, os.Truncate(path, size))
}

// lastFrame is the offset of a log file's last record (4-byte length, 4-byte CRC, body).
func lastFrame(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	mustOK(t, err)
	var at int64
	for off := int64(0); off+8 <= int64(len(b)); {
		at = off
		off += 8 + int64(binary.LittleEndian.Uint32(b[off:]))
	}
	return at
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	mustOK(t, err)
	_, err = f.Write(b)
	mustOK(t, err)
	mustOK(t, f.Close())
}

func flipLastByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	mustOK(t, err)
	i := bytes.LastIndex(b, []byte("tail"))
	if i < 0 {
		t.Fatal("no tail record")
	}
	b[i] ^= 0x20
	mustOK(t, os.WriteFile(path, b, 0o600))
}

// TestDiskWrittenBeforeSeen: whatever a reader can get — an event, or the number of the last
// one — is in the files already (a kill -9 right after would not take it back), though output
// nobody asked for may wait in a buffer.
func TestDiskWrittenBeforeSeen(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	id := d.create()
	onDisk := func() []byte {
		var all []byte
		for _, seg := range d.segments(id) {
			b, err := os.ReadFile(seg)
			mustOK(t, err)
			all = append(all, b...)
		}
		return all
	}
	for i := range 50 {
		mark := fmt.Sprintf("<mark %d>", i)
		d.emit(id, mark)
		if i%2 == 0 {
			b, err := d.reg.Read(context.Background(), id, 0, 0, 0)
			mustOK(t, err)
			if !strings.Contains(describe(b.Events), mark) {
				t.Fatalf("read misses %s", mark)
			}
		} else {
			_, err := d.reg.LastSeq(context.Background(), id)
			mustOK(t, err)
		}
		if !bytes.Contains(onDisk(), []byte(mark)) {
			t.Fatalf("%s was seen but is not written", mark)
		}
	}
}

// TestDiskVolatileData: a log with VolatileData writes its non-data events only. Restored, it
// has every status and error in order, and its data read as missed; the sequence goes on past
// the data numbers it handed out.
func TestDiskVolatileData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "live")
	open := func() *live.DiskStore {
		st, err := live.OpenDiskStore(dir, live.DiskOptions{SyncInterval: time.Hour, BootID: func() string { return "boot-1" }})
		mustOK(t, err)
		return st
	}
	st := open()
	limits := live.LogLimits{Events: 64, Bytes: 1 << 20, Pinned: 64, VolatileData: true}
	_, err := st.Put(context.Background(), abi.Session{SessionID: "s1", Type: abi.TypeDebugStream, Status: abi.StatusActive}, 0)
	mustOK(t, err)
	l, err := st.CreateLog(context.Background(), "s1", limits)
	mustOK(t, err)
	at := time.Unix(1700000000, 0)
	status := func(seq uint64, msg string) *live.Event {
		return &live.Event{Seq: seq, Type: abi.EventStatus, Time: at, SessionID: "s1", Payload: abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected, Message: msg}}
	}
	data := func(seq uint64) *live.Event {
		return &live.Event{Seq: seq, Type: abi.EventData, Time: at, SessionID: "s1", Payload: abi.LogLine{Type: abi.PayloadLogLine, Stream: abi.StreamStdout, Line: fmt.Sprint("line ", seq)}}
	}
	ctx := context.Background()
	for _, batch := range [][]*live.Event{{status(1, "one"), data(2), data(3)}, {data(4), status(5, "five"), data(6)}} {
		_, err := l.Append(ctx, batch...)
		mustOK(t, err)
	}
	if p, err := l.Read(ctx, 0, 0); err != nil || len(p.Events) != 6 {
		t.Fatalf("in memory: %d events, %v", len(p.Events), err)
	}
	mustOK(t, l.Close(ctx))
	mustOK(t, st.Close())
	var written int64
	_ = filepath.WalkDir(filepath.Join(dir, "s1"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".log") {
			fi, _ := d.Info()
			written += fi.Size()
		}
		return nil
	})
	if written == 0 || written > 400 {
		t.Errorf("segments hold %d bytes: want the two status events only", written)
	}

	st = open()
	defer func() { mustOK(t, st.Close()) }()
	rs, err := st.Restore(context.Background(), limits)
	mustOK(t, err)
	if len(rs) != 1 {
		t.Fatalf("restored %d sessions", len(rs))
	}
	p, err := rs[0].Log.Read(ctx, 0, 0)
	mustOK(t, err)
	var got []string
	for _, e := range p.Events {
		got = append(got, fmt.Sprintf("%d %s", e.Seq, e.Type))
	}
	if strings.Join(got, ",") != "1 status,5 status" || p.Missed == 0 {
		t.Fatalf("restored %v, missed %d", got, p.Missed)
	}
	if last, err := rs[0].Log.LastSeq(ctx); err != nil || last < 6 {
		t.Fatalf("the sequence restarts at %d: numbers readers saw would be given again", last)
	}
}

// limitsStore records the limits each session's log was created with.
type limitsStore struct {
	*live.MemoryStore
	got []live.LogLimits
}

func (s *limitsStore) CreateLog(ctx context.Context, id string, l live.LogLimits) (live.EventLog, error) {
	s.got = append(s.got, l)
	return s.MemoryStore.CreateLog(ctx, id, l)
}

// keeperKind is a fake kind whose data is kept elsewhere.
type keeperKind struct{ *livetest.FakeKind }

func (keeperKind) DataKeptElsewhere() bool { return true }

// TestRegistryVolatileDataForDataKeepers: a DataKeeper kind's sessions get logs that keep data
// in memory only; other kinds' logs persist everything.
func TestRegistryVolatileDataForDataKeepers(t *testing.T) {
	st := &limitsStore{MemoryStore: live.NewMemoryStore()}
	r := newRegistry(t, live.Config{Store: st, IdleTimeout: -1},
		livetest.NewFakeKind(abi.TypeTerminal, false), keeperKind{livetest.NewFakeKind(abi.TypeDebugStream, false)})
	for _, typ := range []abi.SessionType{abi.TypeTerminal, abi.TypeDebugStream} {
		_, err := r.Create(context.Background(), abi.CreateRequest{Type: typ, Context: abi.Context{ProjectID: "p"}})
		mustOK(t, err)
	}
	if len(st.got) != 2 || st.got[0].VolatileData || !st.got[1].VolatileData {
		t.Fatalf("limits %+v: want the debug stream's alone volatile", st.got)
	}
}

// closedScript runs the same sessions on any registry: three terminals print past a small
// ring (so their reads have pins and EVENTS_MISSED gaps), publish metadata and an interrupt,
// and close. It returns their ids.
func closedScript(t *testing.T, reg *live.Registry, kind *livetest.FakeKind) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range 3 {
		s, err := reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
		mustOK(t, err)
		inst := kind.Instance(s.SessionID)
		for j := range 10 + 15*i {
			inst.Emit([]byte(fmt.Sprintf("s%d line %d\r\n", i, j)))
			if j%7 == 3 {
				inst.SetMetadata(map[string]any{"j": j})
			}
		}
		_, err = reg.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt})
		mustOK(t, err)
		inst.Emit([]byte("^C\r\n$ "))
		_, err = reg.Close(ctx, s.SessionID, abi.CloseRequested)
		mustOK(t, err)
		ids = append(ids, s.SessionID)
	}
	return ids
}

// readsOf reads a session's events every way a client does — the whole log, after a sequence
// number (inside the ring, inside the gap, at and past the end), and page by page — and
// returns each answer as the wire JSON of its events, with where the next read starts.
func readsOf(t *testing.T, reg *live.Registry, id string) []string {
	t.Helper()
	ctx := context.Background()
	last, err := reg.LastSeq(ctx, id)
	mustOK(t, err)
	var out []string
	add := func(after uint64, limit int) live.Batch {
		b, err := reg.Read(ctx, id, after, limit, 0)
		mustOK(t, err)
		var sb strings.Builder
		fmt.Fprintf(&sb, "read(%d,%d) next=%d done=%v:", after, limit, b.Next, b.Done)
		for _, e := range b.Events {
			sb.WriteString("\n  ")
			sb.Write(e.JSON(abi.ContentANSI))
		}
		out = append(out, sb.String())
		return b
	}
	for _, after := range []uint64{0, 1, 3, last - 10, last - 2, last, last + 5} {
		add(after, 0)
	}
	for after, pages := uint64(0), 0; pages < 100; pages++ {
		b := add(after, 3)
		if b.Done {
			break
		}
		after = b.Next
	}
	return append(out, fmt.Sprint("last=", last))
}

// TestDiskClosedReadOnDemand: a closed session's events are read from its files when asked
// (the gateway keeps none of them in memory), in the registry that closed it and after a
// restart, and they read exactly as a registry that keeps them in memory answers.
func TestDiskClosedReadOnDemand(t *testing.T) {
	limits := live.LogLimits{Events: 16, Bytes: 1 << 20, Pinned: 8}
	memKind := livetest.NewFakeKind(abi.TypeTerminal, false)
	mem := newRegistry(t, live.Config{Now: livetest.NewFakeClock().Now, NewID: livetest.SeqIDs(), Log: limits, IdleTimeout: -1}, memKind)
	ids := closedScript(t, mem, memKind)
	want := map[string][]string{}
	for _, id := range ids {
		want[id] = readsOf(t, mem, id)
	}

	d := newDiskRun(t)
	d.start(limits)
	if got := closedScript(t, d.reg, d.kind); !slices.Equal(got, ids) {
		t.Fatalf("ids %v, want %v", got, ids)
	}
	check := func(when string) {
		t.Helper()
		for _, id := range ids {
			got := readsOf(t, d.reg, id)
			for i := range max(len(got), len(want[id])) {
				g, w := "(none)", "(none)"
				if i < len(got) {
					g = got[i]
				}
				if i < len(want[id]) {
					w = want[id][i]
				}
				if g != w {
					t.Errorf("%s, session %s:\n got %s\nwant %s", when, id, g, w)
					break
				}
			}
		}
	}
	check("closed, same registry, before the flusher's pass")
	mustOK(t, d.st.Sync()) // the flusher lets go of the closed logs' events
	if open, _ := live.HeldEventLogs(d.st); open != 0 {
		t.Fatalf("%d logs still held after the flusher's pass", open)
	}
	check("closed, same registry, read from the files")
	d.kill()
	d.start(limits)
	check("after a restart")
}

// TestDiskClosedSessionsHoldNoEvents: the disk store holds the events of the sessions that
// may still append (the live ones, and closed ones until the flusher's next pass) and, of the
// closed ones, only those decoded by recent reads, within a bound, however many it keeps: their
// events stay on disk until read, and a restart does not read them.
func TestDiskClosedSessionsHoldNoEvents(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	held := func(wantOpen, wantRecent int, when string) {
		t.Helper()
		if open, recent := live.HeldEventLogs(d.st); open != wantOpen || recent != wantRecent {
			t.Errorf("%s: the store holds the events of %d open and %d finished logs, want %d and %d", when, open, recent, wantOpen, wantRecent)
		}
	}
	// 3 MiB of output each: the store keeps the decoded events of two such logs (8 MiB).
	chunk := strings.Repeat("x", 4096)
	var ids []string
	for range 5 {
		id := d.create()
		for range 768 {
			d.emit(id, chunk)
		}
		ids = append(ids, id)
	}
	for _, id := range ids[:4] {
		_, err := d.reg.Close(context.Background(), id, abi.CloseRequested)
		mustOK(t, err)
	}
	mustOK(t, d.st.Sync()) // the flusher's pass
	held(1, 0, "four of five closed")
	for _, id := range ids[:4] {
		d.events(id)
	}
	held(1, 2, "after reading the closed ones")

	d.kill()
	d.start(bigLog)
	mustOK(t, d.st.Sync())
	held(0, 0, "restarted over five sessions, one of them live at the kill")
	// Only the one that was live was read at the start (to close it): a closed session's
	// files are read when a client asks, once for a reader paging through it.
	if n := live.DecodedLogs(d.st); n != 1 {
		t.Errorf("the restart decoded %d logs, want 1 (the one that was live)", n)
	}
	for _, after := range []uint64{0, 1, 2, 3} {
		_, err := d.reg.Read(context.Background(), ids[0], after, 1, 0)
		mustOK(t, err)
	}
	if _, err := d.reg.LastSeq(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if n := live.DecodedLogs(d.st); n != 2 {
		t.Errorf("paging through one closed session decoded its log %d times, want 1", n-1)
	}
	for _, id := range ids {
		if es := d.events(id); len(es) < 5 || es[len(es)-1].Type != abi.EventClose {
			t.Errorf("session %s after the restart: %s", id, describe(es))
		}
	}
	held(0, 2, "after reading them")
	d.reg.Sweep(context.Background(), livetest.T0.Add(2*time.Hour))
	held(0, 0, "past their retention")
}

// TestDiskClosedReboot: a session closed before a reboot is read on demand as it was loaded
// before: its numbering ends past every number it may have handed out, and a reader that had
// everything it saw learns of the gap.
func TestDiskClosedReboot(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	id := d.create()
	d.emit(id, "a", "b")
	_, err := d.reg.Close(context.Background(), id, abi.CloseRequested)
	mustOK(t, err)
	last, err := d.reg.LastSeq(context.Background(), id)
	mustOK(t, err)
	d.kill()
	d.boot = "boot-2"
	d.start(bigLog)
	got, err := d.reg.LastSeq(context.Background(), id)
	mustOK(t, err)
	if got <= last {
		t.Fatalf("LastSeq after a reboot %d, before %d", got, last)
	}
	b, err := d.reg.Read(context.Background(), id, last, 0, 0)
	mustOK(t, err)
	if len(b.Events) != 1 || livetest.MissedOf(t, b.Events[0]) != got-last || !b.Done || b.Next != got {
		t.Errorf("a reader that had everything up to %d gets %s, next %d, done %v", last, describe(b.Events), b.Next, b.Done)
	}
	if es := d.events(id); es[len(es)-1].Type != abi.EventClose {
		t.Errorf("events after the reboot: %s", describe(es))
	}
}

// TestDiskMoved: a session a restart closed, which a kind opened again under a new id, says
// where it went: its object's movedTo (kept for the next gateway too) and the SESSION_CLOSED
// error of any command on it, which also says when it closed. A live session does not move.
func TestDiskMoved(t *testing.T) {
	d := newDiskRun(t)
	d.start(bigLog)
	old := d.create()
	d.kill()
	reg := d.start(bigLog)
	if err := reg.Moved(context.Background(), d.create(), "x"); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("moving a live session: %v", err)
	}
	neu := d.create()
	mustOK(t, reg.Moved(context.Background(), old, neu))
	for _, r := range []*live.Registry{reg, func() *live.Registry { d.kill(); return d.start(bigLog) }()} {
		s, err := r.Get(context.Background(), old)
		mustOK(t, err)
		if s.Metadata[live.MovedToField] != neu || s.Metadata["closeReason"] != abi.CloseGatewayRestart {
			t.Fatalf("the old session: %+v", s.Metadata)
		}
		_, err = r.Send(context.Background(), old, live.SendRequest{Data: []byte("x")})
		at, _ := s.Metadata["closedAt"].(string)
		if abi.CodeOf(err) != abi.CodeSessionClosed || at == "" || !strings.Contains(err.Error(), "closed (gateway-restart) at "+at+"; it moved to session "+neu) {
			t.Fatalf("send to the old session: %v (closed at %q)", err, at)
		}
	}
}
