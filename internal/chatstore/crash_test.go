package chatstore

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the writer processes of the crash, two-writer and benchmark
// tests: with childEnv set, TestMain runs the child's loop instead of the tests.
const childEnv = "NEXUS_STORE_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := runChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return n
}

func runChild(mode string) error {
	ctx := context.Background()
	s, err := Open(os.Getenv("STORE_DIR"), Options{})
	if err != nil {
		return err
	}
	switch mode {
	case "crash":
		// Patch forever (until SIGKILL); print each patch once Patch has returned.
		base, keys, fields := envInt("BASE"), envInt("KEYS"), envInt("FIELDS")
		for i := 0; i < 1_000_000; i++ {
			key := fmt.Sprintf("agent:main:dm:p%d", i%keys)
			field := fmt.Sprintf("f%d", i%fields)
			v := base + i
			if _, err := s.Patch(ctx, key, map[string]any{field: v}); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(os.Stdout, "%s %s %d\n", key, field, v); err != nil {
				return err
			}
		}
		return nil
	case "writer":
		// Wait for the start signal, then patch N times: field <name>_<i> of KEY, or of one
		// of KEYS entries agent:main:dm:b<j> when KEYS is set.
		name, n := os.Getenv("NAME"), envInt("N")
		if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
			return err
		}
		for i := range n {
			key := os.Getenv("KEY")
			patch := map[string]any{fmt.Sprintf("%s_%d", name, i): i}
			if os.Getenv("KEYS") != "" {
				key = fmt.Sprintf("agent:main:dm:b%d", (i*7+len(name))%envInt("KEYS"))
				patch = map[string]any{"inputTokens": i, "lastWriter": name}
			}
			if _, err := s.Patch(ctx, key, patch); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

func childCmd(t testing.TB, mode string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

type ack struct {
	key, field string
	value      int
}

// TestCrashSafety SIGKILLs a patching process at random moments, many times. After each kill
// sessions.json parses and holds every acknowledged patch (or a later value of that field),
// and afterwards a new writer patches without being blocked by anything the dead ones left.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns writer processes")
	}
	ctx := context.Background()
	dir := t.TempDir()
	const keys, fields, rounds = 5, 4, 60
	s := openTest(t, dir, nil)
	for k := range keys {
		if _, err := s.Create(ctx, fmt.Sprintf("agent:main:dm:p%d", k), nil); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the kill delays are reproducible
	acked := map[string]int{}          // key/field -> highest acknowledged value
	total, maxAttempt := 0, 0
	// The budget keeps the test bounded on a slow disk; it only trims rounds beyond minRounds,
	// which always run, so a loaded machine still kills writers many times.
	const minRounds = 15
	budget := time.Now().Add(8 * time.Second)
	round := 0
	for ; round < rounds && (round < minRounds || time.Now().Before(budget)); round++ {
		base := (round + 1) * 1_000_000
		cmd := childCmd(t, "crash", "STORE_DIR="+dir, fmt.Sprintf("BASE=%d", base), fmt.Sprintf("KEYS=%d", keys), fmt.Sprintf("FIELDS=%d", fields))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan ack, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var a ack
				if _, err := fmt.Sscanf(sc.Text(), "%s %s %d", &a.key, &a.field, &a.value); err == nil {
					lines <- a
				}
			}
		}()
		// kill a random time after the first acknowledged patch, so kills land mid-write
		first, ok := <-lines
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("round %d: child acknowledged nothing", round)
		}
		time.Sleep(time.Duration(rng.IntN(80_000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		record := func(a ack) {
			k := a.key + "/" + a.field
			if a.value > acked[k] {
				acked[k] = a.value
			}
			total++
		}
		record(first)
		for a := range lines {
			record(a)
		}
		_ = cmd.Wait()
		maxAttempt = base + 1_000_000

		m := readStore(t, filepath.Join(dir, FileName))
		for k, v := range acked {
			key, field, _ := strings.Cut(k, "/")
			var got int
			if err := json.Unmarshal(m[key][field], &got); err != nil || got < v || got >= maxAttempt {
				t.Fatalf("round %d: %s.%s = %s, acknowledged %d", round, key, field, m[key][field], v)
			}
		}
	}
	t.Logf("%d acknowledged patches across %d kills", total, round)
	s2 := openTest(t, dir, nil)
	if _, err := s2.Patch(ctx, "agent:main:dm:p0", map[string]any{"after": true}); err != nil {
		t.Fatalf("patch after the kills: %v", err)
	}
	if temps, _ := filepath.Glob(filepath.Join(dir, ".sessions.json.tmp-*")); len(temps) != 0 {
		t.Errorf("temp files left: %v", temps)
	}
}

// TestTwoProcessesDifferentFields: two processes patch different fields of one entry at the
// same time, each patch a new field; none is lost.
func TestTwoProcessesDifferentFields(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns writer processes")
	}
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	if _, err := s.Create(ctx, "agent:main:main", nil); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var cmds []*exec.Cmd
	var starts []io.WriteCloser
	for _, name := range []string{"a", "b"} {
		cmd := childCmd(t, "writer", "STORE_DIR="+dir, "NAME="+name, fmt.Sprintf("N=%d", n), "KEY=agent:main:main")
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, starts = append(cmds, cmd), append(starts, in)
	}
	for _, in := range starts {
		if _, err := in.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
	e := readStore(t, s.Path())["agent:main:main"]
	for _, name := range []string{"a", "b"} {
		for i := range n {
			f := fmt.Sprintf("%s_%d", name, i)
			if string(e[f]) != strconv.Itoa(i) {
				t.Fatalf("%s = %s: an update was lost", f, e[f])
			}
		}
	}
}
