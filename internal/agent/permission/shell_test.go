package permission

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakePath makes PATH a directory holding an executable file for each name, so that a bare
// program name resolves to a known path; it returns that directory (symlinks resolved).
func fakePath(t *testing.T, names ...string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	for _, n := range names {
		must(t, os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o700)) //nolint:gosec // a test's program
	}
	t.Setenv("PATH", dir)
	return dir
}

// legacyAllowances are allowances as an older nexus persisted them: program base names.
func legacyAllowances(t *testing.T, names ...string) *Allowances {
	t.Helper()
	b, err := json.Marshal(map[string]any{"exec_global": names})
	must(t, err)
	var al Allowances
	must(t, json.Unmarshal(b, &al))
	return &al
}

// At level trusted a bash command's redirections and $(<file) that read or write outside the
// workspace ask, as do those whose path only the shell can know; the workspace, /dev/null and
// the like do not. The programs are all allowed, so a question is about the paths alone.
func TestTrustedShellRedirections(t *testing.T) {
	w := newWorld(t)
	fakePath(t, "echo", "cat", "bash")
	c := checker(t, w, Trusted, nil)
	out := filepath.Join(w.outside, "f")
	cases := []struct {
		cmd  string
		cwd  string // default the workspace
		want Verdict
		// options are checked when set.
		options []Answer
	}{
		{cmd: `echo hi > $OUT/f`, want: Ask, options: []Answer{Deny, AllowOnce}},
		{cmd: `echo hi > ` + out, want: Ask, options: []Answer{Deny, AllowOnce, AllowFile, AllowWriteDirectory}},
		{cmd: `echo hi >> /tmp/outside`, want: Ask},
		{cmd: `cat < /etc/passwd`, want: Ask, options: []Answer{Deny, AllowOnce, AllowFile}},
		{cmd: `x="$(</etc/shadow)"`, want: Ask},
		{cmd: `echo "$(< /etc/hostname)"`, want: Ask},
		{cmd: `echo > "$VAR"`, want: Ask, options: []Answer{Deny, AllowOnce}},
		{cmd: `echo hi &> /tmp/x`, want: Ask},
		{cmd: `echo hi &>> /tmp/x`, want: Ask},
		{cmd: `echo hi >| /tmp/x`, want: Ask},
		{cmd: `cat <> /tmp/x`, want: Ask},
		{cmd: `echo hi >& /tmp/x`, want: Ask},
		{cmd: `echo hi 2> /tmp/x`, want: Ask},
		{cmd: `echo hi > ~/x`, want: Ask},
		{cmd: `echo hi > /tmp/*.txt`, want: Ask},
		{cmd: `echo hi > "$(echo f)"`, want: Ask},
		{cmd: `echo hi > out/f`, want: Ask}, // ws/out is a symlink to the outside
		{cmd: `cat < secret`, want: Ask},    // ws/secret is a symlink to a file outside
		{cmd: `echo hi > ../outside-private/f`, want: Ask},
		{cmd: `bash -c 'echo hi > /tmp/x'`, want: Ask},
		{cmd: `cat <(cat < /etc/passwd)`, want: Ask},
		{cmd: `echo hi > f.txt`, cwd: w.outside, want: Ask}, // relative to the command's directory
		{cmd: `echo hi > ./inside.txt`, want: Allow},
		{cmd: `echo hi > src/new.txt 2>&1`, want: Allow},
		{cmd: `cat < src/a.go >> log.txt`, want: Allow},
		{cmd: `echo > /dev/null`, want: Allow},
		{cmd: `echo hi 2>/dev/null >/dev/stderr 1>/dev/stdout`, want: Allow},
		{cmd: `echo hi > /dev/fd/2`, want: Allow},
		{cmd: `cat <<< hi`, want: Allow},
		{cmd: "cat <<EOF\nhi\nEOF", want: Allow},
		{cmd: `echo hi 2>&1 >&2`, want: Allow},
		{cmd: `cat < <(echo hi)`, want: Allow},
		{cmd: `x="$(<src/a.go)"`, want: Allow},
		{cmd: `echo hi > f.txt`, cwd: filepath.Join(w.ws, "src"), want: Allow},
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			cwd := tc.cwd
			if cwd == "" {
				cwd = c.Workspace()
			}
			al := legacyAllowances(t, "echo", "cat", "bash")
			d := c.Decide(Call{Tool: "bash", Shell: true, Command: tc.cmd, Cwd: cwd}, al)
			if d.Verdict != tc.want {
				t.Fatalf("Decide(%q) = %v, want %v (%+v)", tc.cmd, d.Verdict, tc.want, d.Request)
			}
			if d.Verdict != Ask {
				return
			}
			if len(d.Request.Programs) != 0 {
				t.Errorf("programs %v asked about, though all are allowed", d.Request.Programs)
			}
			if tc.options != nil && !slices.Equal(d.Request.Options, tc.options) {
				t.Errorf("options %v, want %v", d.Request.Options, tc.options)
			}
		})
	}
}

// A directory change in the command makes its relative redirections unknowable: they ask.
func TestTrustedShellRedirectionAfterCd(t *testing.T) {
	w := newWorld(t)
	fakePath(t, "echo")
	c := checker(t, w, Trusted, nil)
	al := legacyAllowances(t, "echo", "cd")
	d := c.Decide(Call{Tool: "bash", Shell: true, Command: "cd /tmp && echo hi > f", Cwd: c.Workspace()}, al)
	if d.Verdict != Ask || !strings.Contains(d.Request.Dynamic, "f") {
		t.Fatalf("cd then a relative redirection: %v %+v", d.Verdict, d.Request)
	}
}

// An allowance names a program by its resolved path: an allowance of echo does not admit
// ./bin/echo planted in the workspace, nor /tmp/x/echo; a path naming the allowed program
// itself (through a linked directory) matches.
func TestAllowanceByResolvedPath(t *testing.T) {
	w := newWorld(t)
	sys := fakePath(t, "echo")
	must(t, os.MkdirAll(filepath.Join(w.ws, "bin"), 0o700))
	must(t, os.WriteFile(filepath.Join(w.ws, "bin", "echo"), []byte("#!/bin/sh\ncat ~/.ssh/id_rsa\n"), 0o700)) //nolint:gosec // the planted program
	other := t.TempDir()
	must(t, os.WriteFile(filepath.Join(other, "echo"), []byte("#!/bin/sh\n"), 0o700)) //nolint:gosec // another program of that name
	linked := filepath.Join(t.TempDir(), "sysbin")
	must(t, os.Symlink(sys, linked))
	c := checker(t, w, Trusted, nil)

	al := &Allowances{}
	d := c.Decide(Call{Tool: "bash", Shell: true, Command: "echo hi", Cwd: c.Workspace()}, al)
	if d.Verdict != Ask {
		t.Fatalf("echo without an allowance: %v", d.Verdict)
	}
	ok, err := al.Grant(d.Request, AllowExecGlobal)
	must(t, err)
	if !ok {
		t.Fatal("not granted")
	}
	cases := []struct {
		cmd  string
		want Verdict
	}{
		{"echo hi", Allow},
		{filepath.Join(sys, "echo") + " hi", Allow},
		{filepath.Join(linked, "echo") + " hi", Allow},
		{"./bin/echo hi", Ask},
		{"bin/echo hi", Ask},
		{filepath.Join(w.ws, "bin", "echo") + " hi", Ask},
		{filepath.Join(other, "echo") + " hi", Ask},
		{"sudo ./bin/echo hi", Ask},
	}
	for _, tc := range cases {
		d := c.Decide(Call{Tool: "bash", Shell: true, Command: tc.cmd, Cwd: c.Workspace()}, al)
		if d.Verdict != tc.want {
			t.Errorf("after allowing echo, Decide(%q) = %v, want %v (%+v)", tc.cmd, d.Verdict, tc.want, d.Request)
		}
	}
	// The same through an allowance persisted by name, as older versions wrote them: read back,
	// the name is resolved through PATH.
	old := legacyAllowances(t, "echo")
	for _, tc := range cases {
		d := c.Decide(Call{Tool: "bash", Shell: true, Command: tc.cmd, Cwd: c.Workspace()}, old)
		if d.Verdict != tc.want {
			t.Errorf("with a legacy allowance of echo, Decide(%q) = %v, want %v", tc.cmd, d.Verdict, tc.want)
		}
	}
}

// The paths a bash command shows in its text are checked against the blocked paths at every
// level: a redirection or an argument under one refuses the command.
func TestShellBlockedPaths(t *testing.T) {
	w := newWorld(t)
	state := filepath.Join(filepath.Dir(w.ws), "state")
	must(t, os.MkdirAll(state, 0o700))
	write(t, filepath.Join(state, "gateway.token"), "tok\n")
	t.Setenv("HOME", filepath.Dir(w.ws))
	fakePath(t, "cat", "echo", "cp")
	token := filepath.Join(state, "gateway.token")
	cases := []struct {
		cmd  string
		want Verdict // at yolo
	}{
		{"cat " + token, Refuse},
		{"cat < " + token, Refuse},
		{"x=$(<" + token + ")", Refuse},
		{"echo pwned > " + token, Refuse},
		{"cp x " + state + "/", Refuse},
		{"cat ~/state/gateway.token", Refuse},
		{"cat " + state + "/*.token", Refuse},
		{"cat --file=" + token, Refuse},
		{"bash -c 'cat " + token + "'", Refuse},
		{"cat ../state/gateway.token", Refuse},
		{"cat blocked/key", Refuse},
		{"cat src/a.go", Allow},
		// Not statically visible: bash at yolo is no sandbox.
		{"d=state; cat ../$d/gateway.token", Allow},
	}
	for _, level := range []Level{YOLO, Trusted} {
		c := checker(t, w, level, func(cfg *Config) { cfg.BlockedPaths = append(cfg.BlockedPaths, state) })
		al := legacyAllowances(t, "cat", "echo", "cp", "bash")
		for _, tc := range cases {
			d := c.Decide(Call{Tool: "bash", Shell: true, Command: tc.cmd, Cwd: c.Workspace()}, al)
			if tc.want == Refuse {
				if d.Verdict != Refuse || !strings.Contains(d.Reason, "blocked") {
					t.Errorf("%s: Decide(%q) = %v %q, want a refusal", level, tc.cmd, d.Verdict, d.Reason)
				}
				if strings.Contains(d.Reason, "tok\n") {
					t.Errorf("the refusal shows the file")
				}
				continue
			}
			if level == YOLO && d.Verdict != Allow {
				t.Errorf("%s: Decide(%q) = %v %q, want it allowed", level, tc.cmd, d.Verdict, d.Reason)
			}
		}
	}
}

// A hard link planted in the workspace names a file that may also live outside it; os.Root
// cannot tell. At level sandboxed a regular file with more than one link is neither read nor
// written (its other names are unknown), by any tool's file operation.
func TestSandboxedHardLinks(t *testing.T) {
	w := newWorld(t)
	secret := filepath.Join(w.outside, "secret.txt")
	if err := os.Link(secret, filepath.Join(w.ws, "hl")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	c := checker(t, w, Sandboxed, nil)
	p, err := c.Resolve("read_file", "hl", Read)
	if err == nil {
		if f, err := p.Open(); err == nil {
			b := make([]byte, 64)
			n, _ := f.Read(b)
			_ = f.Close()
			t.Fatalf("read the hard link's target: %q", b[:n])
		} else if !strings.Contains(err.Error(), "hard link") {
			t.Fatalf("refused, but not for its links: %v", err)
		}
	}
	wp, err := c.Resolve("write_file", "hl", Write)
	if err == nil {
		if err := wp.WriteFile([]byte("pwned\n"), 0o600); err == nil || !strings.Contains(err.Error(), "hard link") {
			t.Fatalf("wrote through the hard link, or refused for another reason: %v", err)
		}
	}
	d, err := c.Resolve("grep", ".", Read)
	must(t, err)
	fsys, err := d.FS()
	must(t, err)
	if f, err := fsys.Open("hl"); err == nil {
		_ = f.Close()
		t.Fatal("the sandbox's file system opened the hard link")
	}
	if got, _ := os.ReadFile(secret); string(got) != "outside secret\n" {
		t.Fatalf("the outside file changed: %q", got)
	}
	// A file with one link reads as before.
	r, err := c.Resolve("read_file", "src/a.go", Read)
	must(t, err)
	f, err := r.Open()
	must(t, err)
	_ = f.Close()
	// The operator's setting lets hard links through.
	lax := checker(t, w, Sandboxed, func(cfg *Config) { cfg.AllowHardLinks = true })
	p, err = lax.Resolve("read_file", "hl", Read)
	must(t, err)
	f, err = p.Open()
	must(t, err)
	_ = f.Close()
}
