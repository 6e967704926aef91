package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/testkit"
)

// The README's tour is run as printed by testdata/script/readme_tour.txtar through the `tour`
// command below, so the README and nexus cannot drift apart.
//
// Rules (README authors: these are all there is):
//   - Every ```console block of the README is read. A line starting with "$ " is a command; the
//     lines after it, up to the next command or the end of the block, are what it prints (stdout
//     and stderr together, as a terminal shows them).
//   - Each command runs as written with bash -c in the script's work directory, which holds a link
//     to the repository's examples/, with HOME and NEXUS_HOME of the script and the gateway the
//     script started: the README's "make run" in another terminal.
//   - A command whose line ends in a comment starting with "# interactive" (two or more spaces
//     before the #) is shown, not run: it needs a person at a terminal.
//   - Output is compared line by line, trailing blanks ignored, after reading these as variables:
//     session ids (UUIDs), entry ids of 8 hex digits after "id"/"compactionId"/"leafId", agent
//     shell ids (4 hex digits-N_transport), timestamps, absolute paths, pids and process groups,
//     and durations in milliseconds ("duration_ms": N, (N ms), Duration N ms). A variable of the README matches any value of its kind; the
//     same README value must stand for the same real value everywhere (ids and paths and pids:
//     the tour's session ids, for example, must be used consistently), and a later command that
//     names a README id (session close --session-id 01a2...) runs with the real one.
//   - Commands that read what happens asynchronously (`session events` without --follow and
//     `mcp watch` without --follow) are run again until their output matches, as a person typing
//     the next line gives the shell time to answer; any other mismatch fails at once.

// tourStep is one command of the README with the output printed under it.
type tourStep struct {
	line    int // 1-based line of the command in the README
	command string
	want    []string
	skip    bool
}

var interactiveComment = regexp.MustCompile(`\s{2,}# interactive\b.*$`)

// parseTour reads the ```console blocks of a README.
func parseTour(readme string) ([]tourStep, error) {
	var steps []tourStep
	in := false
	for i, l := range strings.Split(readme, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```console":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in && strings.HasPrefix(l, "$ "):
			s := tourStep{line: i + 1, command: strings.TrimPrefix(l, "$ ")}
			if interactiveComment.MatchString(s.command) {
				s.skip = true
			}
			steps = append(steps, s)
		case in:
			if len(steps) == 0 {
				return nil, fmt.Errorf("README line %d: output before any command in a console block", i+1)
			}
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, strings.TrimRight(l, " \t"))
		}
	}
	if in {
		return nil, fmt.Errorf("README: a console block is not closed")
	}
	return steps, nil
}

// tourVar is a kind of value that differs from run to run.
type tourVar struct {
	name string
	// re matches the variable in context; group 1 is the value.
	re *regexp.Regexp
	// actual is what the value may be in real output.
	actual string
	// bind: one README value stands for one real value (both ways: two README values are two
	// real ones).
	bind bool
}

var tourVars = []tourVar{
	{"uuid", regexp.MustCompile(`([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})`), `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, true},
	{"time", regexp.MustCompile(`(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)`), `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`, false},
	{"entry", regexp.MustCompile(`"(?:id|compactionId|leafId)": ?"([0-9a-f]{8})"`), `[0-9a-f]{8}`, true},
	{"shell", regexp.MustCompile(`\b([0-9a-f]{4}-\d+_[a-z]+)\b`), `[0-9a-f]{4}-\d+_[a-z]+`, true},
	{"pid", regexp.MustCompile(`(?:"(?:pid|processGroup)": ?|^  pid +)(\d+)`), `\d+`, true},
	{"ms", regexp.MustCompile(`"duration_ms": (\d+)`), `\d+`, false},
	{"ms", regexp.MustCompile(`\((\d+) ms\)`), `\d+`, false},
	{"ms", regexp.MustCompile(`^Duration +(\d+) ms$`), `\d+`, false},
	{"path", regexp.MustCompile(`(?:^|[\s"'=(])(/[^\s"',)]*)`), `/[^\s"',)]*`, true},
}

// tourBindings maps README values to real ones, per kind.
type tourBindings struct {
	fwd, rev map[string]map[string]string
}

func newTourBindings() *tourBindings {
	return &tourBindings{fwd: map[string]map[string]string{}, rev: map[string]map[string]string{}}
}

func (b *tourBindings) bind(kind, readme, real string) error {
	if b.fwd[kind] == nil {
		b.fwd[kind], b.rev[kind] = map[string]string{}, map[string]string{}
	}
	if got, ok := b.fwd[kind][readme]; ok && got != real {
		return fmt.Errorf("the README's %s %s stood for %s before, here it is %s", kind, readme, got, real)
	}
	if got, ok := b.rev[kind][real]; ok && got != readme {
		return fmt.Errorf("%s %s stands for both %s and %s in the README", kind, real, got, readme)
	}
	b.fwd[kind][readme], b.rev[kind][real] = real, readme
	return nil
}

// substitute replaces the README's ids in a command by the real ones seen so far.
func (b *tourBindings) substitute(command string) string {
	for _, kind := range []string{"uuid", "entry", "shell"} {
		for readme, real := range b.fwd[kind] {
			command = strings.ReplaceAll(command, readme, real)
		}
	}
	return command
}

type tourSpan struct {
	start, end int // the value in the README line
	v          *tourVar
}

// lineTemplate turns a README output line into a regular expression with one group per
// variable, and the variables in order.
func lineTemplate(want string) (*regexp.Regexp, []tourSpan) {
	var spans []tourSpan
	taken := make([]bool, len(want))
	for i := range tourVars {
		v := &tourVars[i]
		for _, m := range v.re.FindAllStringSubmatchIndex(want, -1) {
			s, e := m[2], m[3]
			free := true
			for k := s; k < e; k++ {
				free = free && !taken[k]
			}
			if !free {
				continue
			}
			for k := s; k < e; k++ {
				taken[k] = true
			}
			spans = append(spans, tourSpan{s, e, v})
		}
	}
	// In line order.
	for i := 1; i < len(spans); i++ {
		for j := i; j > 0 && spans[j].start < spans[j-1].start; j-- {
			spans[j], spans[j-1] = spans[j-1], spans[j]
		}
	}
	var re strings.Builder
	re.WriteString("^")
	at := 0
	for _, s := range spans {
		re.WriteString(regexp.QuoteMeta(want[at:s.start]))
		re.WriteString("(" + s.v.actual + ")")
		at = s.end
	}
	re.WriteString(regexp.QuoteMeta(want[at:]))
	re.WriteString("$")
	return regexp.MustCompile(re.String()), spans
}

// matchOutput compares real output with the README's, binding variables; it returns why they
// differ, or "".
func matchOutput(want []string, got string, b *tourBindings) string {
	got = strings.TrimSuffix(got, "\n")
	var lines []string
	if got != "" || len(want) > 0 {
		for _, l := range strings.Split(got, "\n") {
			lines = append(lines, strings.TrimRight(l, " \t"))
		}
	}
	if len(want) == 0 && got == "" {
		return ""
	}
	if len(lines) != len(want) {
		return fmt.Sprintf("%d lines, the README shows %d", len(lines), len(want))
	}
	// Bind only when every line matches, so a retried command starts from the same bindings.
	type pending struct{ kind, readme, real string }
	var binds []pending
	for i, w := range want {
		re, spans := lineTemplate(w)
		m := re.FindStringSubmatch(lines[i])
		if m == nil {
			return fmt.Sprintf("line %d differs:\n  README: %s\n  real:   %s", i+1, w, lines[i])
		}
		for k, s := range spans {
			if s.v.bind {
				binds = append(binds, pending{s.v.name, w[s.start:s.end], m[k+1]})
			}
		}
	}
	trial := &tourBindings{fwd: map[string]map[string]string{}, rev: map[string]map[string]string{}}
	for kind, m := range b.fwd {
		trial.fwd[kind], trial.rev[kind] = map[string]string{}, map[string]string{}
		for k, v := range m {
			trial.fwd[kind][k], trial.rev[kind][v] = v, k
		}
	}
	for _, p := range binds {
		if err := trial.bind(p.kind, p.readme, p.real); err != nil {
			return err.Error()
		}
	}
	*b = *trial
	return ""
}

// asynchronous reports whether a command reads what the gateway or a shell produces on its own
// time, so it may be run again until its output matches.
func asynchronous(command string) bool {
	return (strings.Contains(command, "session events") || strings.Contains(command, "mcp watch")) &&
		!strings.Contains(command, "--follow")
}

// tour README: run the README's console blocks as described above.
func cmdTour(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "tour")
	if len(args) != 1 {
		ts.Fatalf("usage: tour README")
	}
	steps, err := parseTour(ts.ReadFile(args[0]))
	if err != nil {
		ts.Fatalf("%v", err)
	}
	if len(steps) == 0 {
		ts.Fatalf("%s has no console block", args[0])
	}
	b := newTourBindings()
	ran := 0
	for _, s := range steps {
		if s.skip {
			ts.Logf("README line %d, not run (interactive): %s", s.line, s.command)
			continue
		}
		command := b.substitute(s.command)
		var out, why string
		try := func() bool {
			out = runTourCommand(ts, command)
			why = matchOutput(s.want, out, b)
			return why == ""
		}
		if !try() && (!asynchronous(s.command) || !poll(try)) {
			ts.Fatalf("README line %d: $ %s\n%s\nreal output:\n%s", s.line, s.command, why, out)
		}
		ran++
	}
	ts.Logf("ran %d commands of the README's tour", ran)
}

// runTourCommand runs one command line with bash, stdout and stderr together.
func runTourCommand(ts *testscript.TestScript, command string) string {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = ts.MkAbs(".")
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "SHELL", "NEXUS_HOME", "GOCOVERDIR", "GORACE", "LANG"} {
		if v := ts.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && ctx.Err() != nil {
		ts.Fatalf("$ %s: %v", command, ctx.Err())
	}
	// A failing command is part of the tour too (the closed session's error): its output is
	// what is compared.
	return out.String()
}

// TestTourRules checks the parser and the matcher on their own: a mistake there would let the
// README drift silently.
func TestTourRules(t *testing.T) {
	readme := "# x\n```console\n$ nexus a --session-id 01a2009b-9aab-7cb3-979e-b8b15cdb5dc4\n{\"sessionId\": \"01a2009b-9aab-7cb3-979e-b8b15cdb5dc4\", \"pid\": 13452}\n" +
		"$ nexus attach   # interactive: detach with Ctrl-]\n$ echo\n\n```\ntext\n```sh\n$ not a tour\n```\n"
	steps, err := parseTour(readme)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 || steps[0].line != 3 || len(steps[0].want) != 1 || !steps[1].skip || steps[2].skip || len(steps[2].want) != 1 {
		t.Fatalf("steps: %+v", steps)
	}
	for _, tc := range []struct {
		name  string
		want  []string
		got   string
		match bool
	}{
		{"same", []string{"a"}, "a\n", true},
		{"trailing blanks", []string{"a"}, "a  \n", true},
		{"more lines", []string{"a"}, "a\nb\n", false},
		{"uuid", []string{`"id": "01a2009b-9aab-7cb3-979e-b8b15cdb5dc4"`}, `"id": "01a20aaa-0000-7000-8000-000000000000"` + "\n", true},
		{"uuid used twice", []string{"01a2009b-9aab-7cb3-979e-b8b15cdb5dc4 01a2009b-9aab-7cb3-979e-b8b15cdb5dc4"}, "01a20aaa-0000-7000-8000-000000000000 01a20aaa-0000-7000-8000-000000000001\n", false},
		{"two uuids, one value", []string{"01a2009b-9aab-7cb3-979e-b8b15cdb5dc4 01a2009b-9aab-7cb3-979e-b8b15cdb5dc5"}, "01a20aaa-0000-7000-8000-000000000000 01a20aaa-0000-7000-8000-000000000000\n", false},
		{"time", []string{"Created  2026-11-22T00:15:27.403Z"}, "Created  2027-01-01T10:00:00.000Z\n", true},
		{"path", []string{`  "cwd": "/tmp/tour/myapp",`}, `  "cwd": "/home/x/work/myapp",` + "\n", true},
		{"pid", []string{`"pid": 13452,`}, `"pid": 7,` + "\n", true},
		{"ms", []string{"→ exit 0 (22 ms)"}, "→ exit 0 (1034 ms)\n", true},
		{"text differs", []string{"→ exit 0 (22 ms)"}, "→ exit 1 (22 ms)\n", false},
		{"entry", []string{`  "compactionId": "6971baa7",`}, `  "compactionId": "0123abcd",` + "\n", true},
		{"literal hex stays literal", []string{"branch-uuid 6971baa7"}, "branch-uuid 0123abcd\n", false},
		{"no output", nil, "", true},
		{"unexpected output", nil, "x\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := matchOutput(tc.want, tc.got, newTourBindings())
			if (why == "") != tc.match {
				t.Errorf("match = %v (%s), want %v", why == "", why, tc.match)
			}
		})
	}
	// A binding made by one command holds for the next, and names the real id in commands.
	b := newTourBindings()
	if why := matchOutput([]string{"01a2009b-9aab-7cb3-979e-b8b15cdb5dc4"}, "01a20aaa-0000-7000-8000-000000000000\n", b); why != "" {
		t.Fatal(why)
	}
	if why := matchOutput([]string{"x 01a2009b-9aab-7cb3-979e-b8b15cdb5dc4"}, "x 01a20aaa-0000-7000-8000-000000000001\n", b); why == "" {
		t.Error("a README id stood for two real ids")
	}
	if got := b.substitute("nexus session close --session-id 01a2009b-9aab-7cb3-979e-b8b15cdb5dc4"); got != "nexus session close --session-id 01a20aaa-0000-7000-8000-000000000000" {
		t.Errorf("substitute: %s", got)
	}
	if _, err := os.Stat("../../README.md"); err != nil {
		t.Fatalf("the README the tour script runs: %v", err)
	}
}
