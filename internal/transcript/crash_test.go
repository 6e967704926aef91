package transcript

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashChildEnv names the transcript the helper process appends to.
const crashChildEnv = "NEXUS_TRANSCRIPT_CRASH_CHILD"

// TestCrashChild is the writer process TestCrashAppend kills: it continues
// (or creates) the transcript and appends entries with SyncEntry, printing
// each id once Append has returned. Some entries are large so that a kill
// can land in the middle of a write and tear the last line.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("helper process of TestCrashAppend")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashChildEnv+"_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 1))
	var w *Writer
	var err error
	if _, serr := os.Lstat(path); serr == nil {
		w, err = OpenWriter(path, WriterOptions{})
	} else {
		w, err = Create(path, "/crash", WriterOptions{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	out := bufio.NewWriterSize(os.Stdout, 64)
	for i := range 100000 {
		size := 200 + rng.IntN(2000)
		if rng.IntN(50) == 0 {
			size = 64 << 10
		}
		msg := userMsg(fmt.Sprintf("%d %s", i, strings.Repeat("x", size)))
		if i%2 == 1 {
			msg = assistantMsg(strings.Repeat("y", size))
		}
		id, err := w.AppendMessage(msg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(4)
		}
		// The id is acknowledged only once it is on stdout.
		fmt.Fprintln(out, id)
		if err := out.Flush(); err != nil {
			os.Exit(5)
		}
	}
	os.Exit(0)
}

var ackLine = regexp.MustCompile(`^[0-9a-f]{8}$`)

// TestCrashAppend kills a writer process (SIGKILL) at random moments, many
// times, continuing the same transcript each time. After every kill the
// file parses, every acknowledged entry is in it, the entries form one
// chain, and the next writer continues it.
func TestCrashAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns writer processes")
	}
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	path := filepath.Join(t.TempDir(), "crash.jsonl")
	acked := map[string]bool{}
	const rounds = 20
	torn := 0
	for round := range rounds {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path, fmt.Sprintf("%s_SEED=%d", crashChildEnv, rng.Uint64()))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		killAfter := 1 + rng.IntN(200)
		n := 0
		killed := false
		for sc.Scan() {
			if line := sc.Text(); ackLine.MatchString(line) {
				acked[line] = true
				n++
			}
			if n == killAfter && !killed {
				// A little later than the ack, so that the kill lands anywhere
				// in the next append, the large writes included.
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		}
		err = cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != -1 {
			t.Fatalf("round %d: writer did not die by the kill: %v\n%s", round, err, stderr.String())
		}

		f, err := Open(path)
		if errors.Is(err, fs.ErrNotExist) && n == 0 {
			continue // killed before the first entry: lazy creation left no file
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkChain(t, f, acked, fmt.Sprintf("round %d", round))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// A process kill never tears a write to a regular file, a power
		// loss can: every third round leaves a torn line as one would,
		// for the next writer to start after.
		if round%3 == 2 {
			tearLastLine(t, path, rng)
			torn++
		}
	}
	t.Logf("%d rounds, %d acknowledged entries, %d torn last lines", rounds, len(acked), torn)

	w, err := OpenWriter(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := w.LeafID()
	id, err := w.AppendMessage(userMsg("after the crashes"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path)
	if e := f.Entry(id); e == nil || e.ParentID != leaf || f.Leaf() != e {
		t.Fatalf("final entry %+v, want the leaf, child of %q", e, leaf)
	}
	acked[id] = true
	checkChain(t, f, acked, "final")
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*"))
	if len(left) != 0 {
		t.Errorf("stray files: %v", left)
	}
}

// checkChain checks that every acknowledged id is an entry and that the
// entries form one chain in file order.
func checkChain(t *testing.T, f *File, acked map[string]bool, what string) {
	t.Helper()
	for id := range acked {
		if f.Entry(id) == nil {
			t.Fatalf("%s: acknowledged entry %s is missing", what, id)
		}
	}
	for i, e := range f.Entries {
		want := ""
		if i > 0 {
			want = f.Entries[i-1].ID
		}
		if e.ParentID != want {
			t.Fatalf("%s: entry %d (line %d) has parent %q, want %q", what, i, e.Line, e.ParentID, want)
		}
	}
	for _, note := range f.Notes {
		if !strings.Contains(note, "torn last line") && !strings.Contains(note, "not a JSON object") {
			t.Errorf("%s: unexpected note %q", what, note)
		}
	}
}

// tearLastLine appends the start of an entry line without its newline.
func tearLastLine(t *testing.T, path string, rng *rand.Rand) {
	t.Helper()
	line := `{"type":"message","id":"0badf00d","parentId":null,"timestamp":"2026-05-01T09:00:00.000Z","message":{"role":"user","content":"torn"}}`
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteString(line[:1+rng.IntN(len(line)-2)]); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path)
	if len(f.Notes) == 0 || !strings.Contains(f.Notes[len(f.Notes)-1], "torn last line") {
		t.Fatalf("torn line not noticed: %v", f.Notes)
	}
}
