package chatstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/transcript"
)

// memTranscript is an Appender writing pi v3 lines to memory, as transcript.Writer would.
type memTranscript struct {
	lines []string
	n     int
	fail  error
}

func newMemTranscript() *memTranscript {
	return &memTranscript{lines: []string{`{"type":"session","version":3,"id":"s1","timestamp":"2026-05-01T09:00:00.000Z","cwd":"/w"}`}}
}

func (m *memTranscript) AppendCustom(customType string, data any) (string, error) {
	if m.fail != nil {
		return "", m.fail
	}
	m.n++
	id := fmt.Sprintf("%08x", m.n)
	parent := "null"
	if m.n > 1 {
		parent = fmt.Sprintf("%q", fmt.Sprintf("%08x", m.n-1))
	}
	d, err := json.Marshal(data)
	if err != nil {
		return "", err
	}
	m.lines = append(m.lines, fmt.Sprintf(`{"type":"custom","id":%q,"parentId":%s,"timestamp":"2026-05-01T09:00:%02d.000Z","customType":%q,"data":%s}`, id, parent, m.n, customType, d))
	return id, nil
}

func (m *memTranscript) file(t *testing.T) *transcript.File {
	t.Helper()
	f, err := transcript.Read(strings.NewReader(strings.Join(m.lines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRunLifecycle(t *testing.T) {
	m := newMemTranscript()
	opts := RunOptions{NewID: ids("run")}
	r1, err := StartRunWith(m, "s1", opts)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
		want error
	}{
		{"streaming", func() error { return r1.Phase(PhaseStreaming) }, nil},
		{"streaming again is a no-op", func() error { return r1.Phase(PhaseStreaming) }, nil},
		{"compacting", func() error { return r1.Phase(PhaseCompacting) }, nil},
		{"retry: streaming again after compacting", func() error { return r1.Phase(PhaseStreaming) }, nil},
		{"no going back to start", func() error { return r1.Phase(PhaseStart) }, ErrRunPhase},
		{"start is not a phase move", func() error { return r1.Phase(PhaseStart) }, ErrRunPhase},
		{"end through Phase", func() error { return r1.Phase(PhaseEnd) }, ErrRunPhase},
		{"bad outcome", func() error { return r1.End("maybe", nil) }, ErrInvalid},
		{"ok with an error", func() error { return r1.End(OutcomeOK, errors.New("x")) }, ErrInvalid},
		{"end", func() error { return r1.End(OutcomeTimeout, errors.New("deadline exceeded after 600s")) }, nil},
		{"end twice", func() error { return r1.End(OutcomeOK, nil) }, ErrRunEnded},
		{"phase after end", func() error { return r1.Phase(PhaseCompacting) }, ErrRunEnded},
	}
	for _, st := range steps {
		if err := st.do(); !errors.Is(err, st.want) {
			t.Fatalf("%s: err = %v, want %v", st.name, err, st.want)
		}
	}
	r2, err := StartRunWith(m, "s1", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.End(OutcomeOK, nil); err != nil {
		t.Fatal(err)
	}
	r3, err := StartRunWith(m, "s1", opts) // never ends: the process died
	if err != nil {
		t.Fatal(err)
	}
	if r3.Current() != PhaseStart {
		t.Errorf("current = %s", r3.Current())
	}
	// noise that must be skipped
	if _, err := m.AppendCustom("other.ext", map[string]any{"runId": "zzz"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AppendCustom(RunCustomType, "not an object"); err != nil {
		t.Fatal(err)
	}

	f := m.file(t)
	runs, err := RunsFromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(runs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"runId":"run-0001","sessionId":"s1","startedAt":"2026-05-01T09:00:01.000Z","endedAt":"2026-05-01T09:00:05.000Z","ended":true,"outcome":"timeout","error":"deadline exceeded after 600s","phases":[{"phase":"start","entryId":"00000001","timestamp":"2026-05-01T09:00:01.000Z"},{"phase":"streaming","entryId":"00000002","timestamp":"2026-05-01T09:00:02.000Z"},{"phase":"compacting","entryId":"00000003","timestamp":"2026-05-01T09:00:03.000Z"},{"phase":"streaming","entryId":"00000004","timestamp":"2026-05-01T09:00:04.000Z"},{"phase":"end","entryId":"00000005","timestamp":"2026-05-01T09:00:05.000Z"}]},` +
		`{"runId":"run-0002","sessionId":"s1","startedAt":"2026-05-01T09:00:06.000Z","endedAt":"2026-05-01T09:00:07.000Z","ended":true,"outcome":"ok","phases":[{"phase":"start","entryId":"00000006","timestamp":"2026-05-01T09:00:06.000Z"},{"phase":"end","entryId":"00000007","timestamp":"2026-05-01T09:00:07.000Z"}]},` +
		`{"runId":"run-0003","sessionId":"s1","startedAt":"2026-05-01T09:00:08.000Z","ended":false,"phases":[{"phase":"start","entryId":"00000008","timestamp":"2026-05-01T09:00:08.000Z"}]}]`
	if string(got) != want {
		t.Errorf("runs =\n%s\nwant\n%s", got, want)
	}
	// the recorded data is what the transcript format's custom entry carries
	if !strings.Contains(m.lines[5], `"customType":"nexus.run","data":{"runId":"run-0001","sessionId":"s1","phase":"end","outcome":"timeout","error":"deadline exceeded after 600s"}`) {
		t.Errorf("end line = %s", m.lines[5])
	}
	// a path subset (here: the first two entries) gives the runs on it
	part, err := RunsFromEntries(f, f.Entries[:2])
	if err != nil || len(part) != 1 || part[0].Ended {
		t.Errorf("partial = %+v, %v", part, err)
	}
}

func TestRunAppendFailure(t *testing.T) {
	m := newMemTranscript()
	m.fail = errors.New("disk full")
	if _, err := StartRun(m, "s1"); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("StartRun = %v", err)
	}
	if _, err := StartRun(nil, "s1"); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil appender: %v", err)
	}
	if _, err := StartRun(newMemTranscript(), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("no session: %v", err)
	}
	m.fail = nil
	r, err := StartRun(m, "s1")
	if err != nil {
		t.Fatal(err)
	}
	m.fail = errors.New("io")
	if err := r.End(OutcomeOK, nil); err == nil {
		t.Fatal("End succeeded without recording")
	}
	m.fail = nil
	// a failed End can be retried
	if err := r.End(OutcomeOK, nil); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count([]byte(strings.Join(m.lines, "\n")), []byte(`"phase":"end"`)); n != 1 {
		t.Errorf("%d end entries", n)
	}
}

// TestRunsThroughTranscriptWriter records a run with the real transcript writer and reads it
// back from the file.
func TestRunsThroughTranscriptWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	w, err := transcript.Create(path, "/work", transcript.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var a Appender = w
	if _, err := w.AppendMessage(map[string]any{"role": "user", "content": "hi", "timestamp": 1}); err != nil {
		t.Fatal(err)
	}
	r, err := StartRunWith(a, "s1", RunOptions{NewID: ids("run")})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Phase(PhaseStreaming); err != nil {
		t.Fatal(err)
	}
	if err := r.End(OutcomeError, errors.New("provider 500")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := transcript.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	runs, err := RunsFromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].RunID != "run-0001" || !runs[0].Ended || runs[0].Outcome != OutcomeError ||
		runs[0].Error != "provider 500" || len(runs[0].Phases) != 3 {
		t.Errorf("runs = %+v", runs)
	}
}
