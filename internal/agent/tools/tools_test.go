package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
)

// fixture is a workspace, a private directory outside it, and links inside pointing out.
type fixture struct {
	ws, outside string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base := t.TempDir()
	f := fixture{ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside-private")}
	files := map[string]string{
		"ws/src/a.go":              "package a\n\nfunc A() int { return 1 }\n",
		"ws/src/b.go":              "package a\n\nfunc B() int { return 2 }\n",
		"ws/src/deep/c.go":         "package deep\n// TODO: c\n",
		"ws/docs/readme.md":        "# readme\nTODO: docs\n",
		"ws/blocked/key.txt":       "TODO: secret key\n",
		"ws/dup.txt":               "x y x y x\n",
		"outside-private/s.txt":    "TODO: outside secret\n",
		"outside-private/d/in.txt": "TODO: outside dir\n",
	}
	for p, s := range files {
		full := filepath.Join(base, p)
		mustOK(t, os.MkdirAll(filepath.Dir(full), 0o700))
		mustOK(t, os.WriteFile(full, []byte(s), 0o600))
	}
	mustOK(t, os.WriteFile(filepath.Join(f.ws, "bin.dat"), []byte("TODO\x00binary"), 0o600))
	mustOK(t, os.Symlink(f.outside, filepath.Join(f.ws, "out")))
	mustOK(t, os.Symlink(filepath.Join(f.outside, "s.txt"), filepath.Join(f.ws, "secret")))
	return f
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func registry(t *testing.T, f fixture, level permission.Level, mod func(*permission.Config)) *tools.Registry {
	t.Helper()
	cfg := permission.Config{Level: level, Workspace: f.ws, BlockedPaths: []string{"blocked"}}
	if mod != nil {
		mod(&cfg)
	}
	perm, err := permission.New(cfg)
	mustOK(t, err)
	t.Cleanup(func() { _ = perm.Close() })
	r := tools.NewRegistry(perm)
	for _, tl := range tools.Builtins(perm) {
		mustOK(t, r.Add(tl))
	}
	return r
}

// call prepares and runs a call as the turn loop would, answering a confirmation with answer
// (no answer: a call that asks fails the test).
func call(t *testing.T, r *tools.Registry, al *permission.Allowances, name, args string, answer permission.Answer) (tools.Result, error) {
	t.Helper()
	p, err := r.Prepare(name, json.RawMessage(args), al)
	if err != nil {
		return tools.Result{}, err
	}
	switch p.Decision.Verdict {
	case permission.Refuse:
		return tools.Result{}, errors.New(p.Decision.Reason)
	case permission.Ask:
		if answer == "" {
			t.Fatalf("%s %s asks %+v", name, args, p.Decision.Request)
		}
		ok, err := p.Confirm(answer, al)
		if err != nil {
			return tools.Result{}, err
		}
		if !ok {
			return tools.Result{}, errors.New(p.Decision.Reason)
		}
	}
	return p.Run(t.Context())
}

func jsonArgs(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	mustOK(t, err)
	return string(b)
}

func TestFileTools(t *testing.T) {
	cases := []struct {
		name    string
		tool    string
		args    map[string]any
		want    []string // substrings of the output
		wantErr string
		check   func(t *testing.T, f fixture)
	}{
		{name: "read numbered", tool: "read_file", args: map[string]any{"path": "src/a.go"}, want: []string{"     1\tpackage a", "     3\tfunc A()"}},
		{name: "read window", tool: "read_file", args: map[string]any{"path": "src/a.go", "offset": 2, "limit": 1},
			want: []string{"     2\t\n", "more lines follow: read again with offset 3"}},
		{name: "read past end", tool: "read_file", args: map[string]any{"path": "src/a.go", "offset": 99}, want: []string{"offset 99 is past its end"}},
		{name: "read a directory", tool: "read_file", args: map[string]any{"path": "src"}, wantErr: "not a regular file"},
		{name: "read offset 0 fails the schema", tool: "read_file", args: map[string]any{"path": "src/a.go", "offset": 0}, wantErr: "invalid arguments"},
		{name: "read without path fails the schema", tool: "read_file", args: map[string]any{}, wantErr: "invalid arguments"},
		{name: "read path of the wrong type", tool: "read_file", args: map[string]any{"path": 7}, wantErr: "invalid arguments"},
		{name: "read missing", tool: "read_file", args: map[string]any{"path": "nope.txt"}, wantErr: `open "nope.txt": no such file`},
		{name: "write creates directories", tool: "write_file", args: map[string]any{"path": "new/dir/f.txt", "content": "hi\n"}, want: []string{"wrote 3 bytes"},
			check: func(t *testing.T, f fixture) { expectFile(t, filepath.Join(f.ws, "new/dir/f.txt"), "hi\n") }},
		{name: "edit once", tool: "edit_file", args: map[string]any{"path": "src/a.go", "old_string": "return 1", "new_string": "return 10"},
			want: []string{"replaced 1 occurrence"}, check: func(t *testing.T, f fixture) {
				expectFile(t, filepath.Join(f.ws, "src/a.go"), "package a\n\nfunc A() int { return 10 }\n")
			}},
		{name: "edit ambiguous", tool: "edit_file", args: map[string]any{"path": "dup.txt", "old_string": "x", "new_string": "z"}, wantErr: "occurs 3 times",
			check: func(t *testing.T, f fixture) { expectFile(t, filepath.Join(f.ws, "dup.txt"), "x y x y x\n") }},
		{name: "edit replace all", tool: "edit_file", args: map[string]any{"path": "dup.txt", "old_string": "x", "new_string": "z", "replace_all": true},
			want: []string{"replaced 3"}, check: func(t *testing.T, f fixture) { expectFile(t, filepath.Join(f.ws, "dup.txt"), "z y z y z\n") }},
		{name: "edit absent", tool: "edit_file", args: map[string]any{"path": "dup.txt", "old_string": "q", "new_string": "z"}, wantErr: "does not occur"},
		{name: "edit empty old", tool: "edit_file", args: map[string]any{"path": "dup.txt", "old_string": "", "new_string": "z"}, wantErr: "invalid arguments"},
		{name: "copy", tool: "copy_file", args: map[string]any{"source": "src/a.go", "destination": "copy/a.go"}, want: []string{"copied"},
			check: func(t *testing.T, f fixture) {
				expectFile(t, filepath.Join(f.ws, "copy/a.go"), "package a\n\nfunc A() int { return 1 }\n")
			}},
		{name: "copy over existing", tool: "copy_file", args: map[string]any{"source": "src/a.go", "destination": "src/b.go"}, wantErr: "set overwrite"},
		{name: "copy overwrite", tool: "copy_file", args: map[string]any{"source": "src/a.go", "destination": "src/b.go", "overwrite": true}, want: []string{"copied"}},
		{name: "list", tool: "list_dir", args: map[string]any{"path": "."}, want: []string{"src/\n", "dup.txt\n", "out@\n", "secret@\n"}},
		{name: "list default", tool: "list_dir", args: map[string]any{}, want: []string{"docs/\n"}},
		{name: "glob doublestar", tool: "glob", args: map[string]any{"pattern": "**/*.go"}, want: []string{"src/a.go\n", "src/b.go\n", "src/deep/c.go\n"}},
		{name: "glob one level", tool: "glob", args: map[string]any{"pattern": "src/*.go"}, want: []string{"src/a.go\n"}},
		{name: "glob escaping pattern", tool: "glob", args: map[string]any{"pattern": "../**"}, wantErr: "stay under it"},
		{name: "glob bad pattern", tool: "glob", args: map[string]any{"pattern": "[a"}, wantErr: "syntax error in pattern"},
		{name: "grep", tool: "grep", args: map[string]any{"pattern": "TODO"}, want: []string{"src/deep/c.go:2:// TODO: c", "docs/readme.md:2:TODO: docs"}},
		{name: "grep include", tool: "grep", args: map[string]any{"pattern": "todo", "case_insensitive": true, "include": "**/*.md"}, want: []string{"docs/readme.md:2:"}},
		{name: "grep one file", tool: "grep", args: map[string]any{"pattern": "func", "path": "src/b.go"}, want: []string{"src/b.go:3:func B()"}},
		{name: "grep bounded", tool: "grep", args: map[string]any{"pattern": "package", "max_results": 1}, want: []string{"search stopped early"}},
		{name: "grep bad regexp", tool: "grep", args: map[string]any{"pattern": "("}, wantErr: "missing closing )"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, level := range []permission.Level{permission.Sandboxed, permission.Trusted, permission.YOLO} {
				f := newFixture(t)
				r := registry(t, f, level, nil)
				res, err := call(t, r, &permission.Allowances{}, tc.tool, jsonArgs(t, tc.args), "")
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("%s: %s = %q, %v; want error %q", level, tc.tool, res.Output, err, tc.wantErr)
					}
				} else {
					if err != nil {
						t.Fatalf("%s: %s: %v", level, tc.tool, err)
					}
					for _, w := range tc.want {
						if !strings.Contains(res.Output, w) {
							t.Fatalf("%s: %s output lacks %q:\n%s", level, tc.tool, w, res.Output)
						}
					}
					// Neither blocked files, binary files nor anything behind a link show up.
					for _, never := range []string{"blocked/", "bin.dat", "outside", "in.txt"} {
						if (tc.tool == "grep" || tc.tool == "glob") && strings.Contains(res.Output, never) {
							t.Fatalf("%s: %s output shows %q:\n%s", level, tc.tool, never, res.Output)
						}
					}
				}
				if tc.check != nil {
					tc.check(t, f)
				}
			}
		})
	}
}

func expectFile(t *testing.T, p, want string) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil || string(got) != want {
		t.Fatalf("%s = %q, %v; want %q", p, got, err, want)
	}
}

// Every path argument of every tool, as an adversary writes it, in SANDBOXED mode: refused,
// the error never naming the outside, nothing outside read or changed.
func TestSandboxRefusesEscapes(t *testing.T) {
	escapes := []string{"../outside-private/s.txt", "out/s.txt", "secret", "out", "src/../../outside-private", "/etc/passwd", "src/a.go\x00", "blocked/key.txt"}
	argsFor := map[string]func(p string) map[string]any{
		"read_file":  func(p string) map[string]any { return map[string]any{"path": p} },
		"write_file": func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned"} },
		"edit_file": func(p string) map[string]any {
			return map[string]any{"path": p, "old_string": "TODO", "new_string": "pwned"}
		},
		"copy_file (source)": func(p string) map[string]any { return map[string]any{"source": p, "destination": "stolen.txt"} },
		"copy_file (dest)": func(p string) map[string]any {
			return map[string]any{"source": "src/a.go", "destination": p, "overwrite": true}
		},
		"list_dir": func(p string) map[string]any { return map[string]any{"path": p} },
		"glob":     func(p string) map[string]any { return map[string]any{"pattern": "**", "path": p} },
		"grep":     func(p string) map[string]any { return map[string]any{"pattern": "TODO", "path": p} },
	}
	f := newFixture(t)
	r := registry(t, f, permission.Sandboxed, nil)
	for label, mk := range argsFor {
		tool, _, _ := strings.Cut(label, " ")
		for _, esc := range escapes {
			res, err := call(t, r, &permission.Allowances{}, tool, jsonArgs(t, mk(esc)), "")
			if err == nil {
				t.Errorf("%s %q ran: %q", label, esc, res.Output)
				continue
			}
			if strings.Contains(err.Error(), f.outside) || strings.Contains(err.Error(), "outside-private/") && !strings.Contains(esc, "outside-private") {
				t.Errorf("%s %q: the error names the outside: %v", label, esc, err)
			}
		}
	}
	// A duplicate key: the decision and the tool read the same (the last) value.
	if _, err := call(t, r, &permission.Allowances{}, "write_file", `{"path":"ok.txt","content":"x","path":"../outside-private/dup.txt"}`, ""); err == nil {
		t.Error("a duplicate path key slipped past the decision")
	}
	if _, err := os.Stat(filepath.Join(f.outside, "dup.txt")); err == nil {
		t.Error("written outside through a duplicate key")
	}
	expectFile(t, filepath.Join(f.outside, "s.txt"), "TODO: outside secret\n")
	if _, err := os.Stat(filepath.Join(f.ws, "stolen.txt")); err == nil {
		t.Error("copy_file copied something in")
	}
	expectFile(t, filepath.Join(f.ws, "blocked/key.txt"), "TODO: secret key\n")
}

// In TRUSTED mode a link inside pointing out is a path outside the workspace: writing through
// it asks, and the user's answer decides.
func TestTrustedAsksForALinkOut(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.Trusted, nil)
	p, err := r.Prepare("write_file", json.RawMessage(`{"path":"out/new.txt","content":"x"}`), &permission.Allowances{})
	mustOK(t, err)
	if p.Decision.Verdict != permission.Ask || len(p.Decision.Request.Paths) != 1 || p.Decision.Request.Paths[0] != filepath.Join(evalDir(t, f.outside), "new.txt") {
		t.Fatalf("decision %+v %+v", p.Decision, p.Decision.Request)
	}
	al := &permission.Allowances{}
	if _, err := call(t, r, al, "write_file", `{"path":"out/new.txt","content":"x"}`, permission.Deny); err == nil {
		t.Fatal("a denied call ran")
	}
	if _, err := os.Stat(filepath.Join(f.outside, "new.txt")); err == nil {
		t.Fatal("the denied write happened")
	}
	if _, err := call(t, r, al, "write_file", `{"path":"out/new.txt","content":"x"}`, permission.AllowWriteDirectory); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, r, al, "copy_file", `{"source":"src/a.go","destination":"out/a.go"}`, ""); err != nil {
		t.Fatalf("a write under the allowed directory asked or failed: %v", err)
	}
	expectFile(t, filepath.Join(f.outside, "a.go"), "package a\n\nfunc A() int { return 1 }\n")
}

func evalDir(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	mustOK(t, err)
	return r
}

func TestFieldSizeLimit(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.YOLO, nil)
	big := strings.Repeat("a", tools.MaxFieldBytes)
	cases := []struct {
		name    string
		args    string
		wantErr bool
	}{
		{name: "content at the limit", args: `{"path":"big.txt","content":"` + big + `"}`},
		{name: "content over the limit", args: `{"path":"big.txt","content":"` + big + `b"}`, wantErr: true},
		{name: "escaped content decodes over the limit", args: `{"path":"big.txt","content":"` + big[:tools.MaxFieldBytes-1] + `\u0041\u0042"}`, wantErr: true},
		{name: "key over the limit", args: `{"path":"big.txt","content":"x","` + big + `b":1}`, wantErr: true},
		{name: "nested over the limit", args: `{"path":"big.txt","content":"x","extra":[{"k":"` + big + `b"}]}`, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Prepare("write_file", json.RawMessage(tc.args), nil)
			if tc.wantErr {
				if !errors.Is(err, tools.ErrArguments) || !strings.Contains(err.Error(), "10 MB") {
					t.Fatalf("Prepare = %v, want a size refusal", err)
				}
				return
			}
			mustOK(t, err)
		})
	}
	// The size is checked per field, before anything runs: nothing was written.
	if _, err := os.Stat(filepath.Join(f.ws, "big.txt")); err == nil {
		t.Fatal("big.txt written by Prepare")
	}
}

func TestMatchGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/a.go", true},
		{"**", "x/y/z", true},
		{"src/**/c.go", "src/c.go", true},
		{"src/**/c.go", "src/a/b/c.go", true},
		{"src/**/c.go", "lib/a/c.go", false},
		{"*.go", "x/a.go", false},
		{"a/**/**/b", "a/b", true},
		{"?.md", "ab.md", false},
		{"[ab].md", "b.md", true},
	}
	for _, tc := range cases {
		if got, err := tools.MatchGlob(tc.pattern, tc.name); err != nil || got != tc.want {
			t.Errorf("MatchGlob(%q, %q) = %v, %v; want %v", tc.pattern, tc.name, got, err, tc.want)
		}
	}
}

// blocker is a tool that runs until its context ends.
type blocker struct{}

func (blocker) Spec() tools.Spec {
	return tools.Spec{Name: "block", Description: "waits", Schema: &jsonschemaObject}
}

func (blocker) Run(ctx context.Context, _ json.RawMessage) (tools.Result, error) {
	<-ctx.Done()
	return tools.Result{}, ctx.Err()
}

func TestTimeoutAndRegistry(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.YOLO, func(c *permission.Config) {
		c.Tools = map[string]permission.ToolSettings{"block": {Timeout: 1}, "grep": {Disabled: true}}
	})
	mustOK(t, r.Add(blocker{}))
	if err := r.Add(blocker{}); err == nil {
		t.Fatal("a tool registered twice")
	}
	p, err := r.Prepare("block", nil, nil)
	mustOK(t, err)
	if p.Timeout != 1 {
		t.Fatalf("timeout %v", p.Timeout)
	}
	if _, err := p.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "block timed out") {
		t.Fatalf("Run = %v, want a timeout", err)
	}
	if _, err := r.Prepare("grep", json.RawMessage(`{"pattern":"x"}`), nil); err == nil || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("disabled grep: %v", err)
	}
	if _, err := r.Prepare("no_such_tool", nil, nil); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("unknown tool: %v", err)
	}
	for _, s := range r.Specs() {
		if s.Name == "grep" {
			t.Fatal("a disabled tool is offered")
		}
	}
	p, err = r.Prepare("read_file", json.RawMessage(`{"path":"src/a.go"}`), nil)
	mustOK(t, err)
	if p.Timeout != permission.DefaultTimeout {
		t.Fatalf("default timeout %v", p.Timeout)
	}
	if _, err := p.Confirm(permission.AllowOnce, &permission.Allowances{}); err == nil {
		t.Fatal("Confirm of a call that did not ask succeeded")
	}
}

var jsonschemaObject = jsonschema.Schema{Type: "object"}

// A link swapped in between the decision and the run (a parallel call could do it): the run
// refuses a path that no longer resolves where it did when the call was decided, at every
// level, and nothing outside is touched.
func TestSwapBetweenPrepareAndRun(t *testing.T) {
	for _, level := range []permission.Level{permission.Trusted, permission.YOLO, permission.Sandboxed} {
		t.Run(string(level), func(t *testing.T) {
			f := newFixture(t)
			r := registry(t, f, level, nil)
			for _, tc := range []struct{ tool, args string }{
				{"write_file", `{"path":"src/new.txt","content":"pwned"}`},
				{"copy_file", `{"source":"docs/readme.md","destination":"src/new.txt"}`},
				{"read_file", `{"path":"src/s.txt"}`},
			} {
				mustOK(t, os.RemoveAll(filepath.Join(f.ws, "src")))
				mustOK(t, os.MkdirAll(filepath.Join(f.ws, "src"), 0o700))
				mustOK(t, os.WriteFile(filepath.Join(f.ws, "src", "s.txt"), []byte("inside"), 0o600))
				p, err := r.Prepare(tc.tool, json.RawMessage(tc.args), &permission.Allowances{})
				mustOK(t, err)
				if p.Decision.Verdict != permission.Allow {
					t.Fatalf("%s: %+v", tc.tool, p.Decision)
				}
				mustOK(t, os.RemoveAll(filepath.Join(f.ws, "src")))
				mustOK(t, os.Symlink(f.outside, filepath.Join(f.ws, "src")))
				res, err := p.Run(t.Context())
				if err == nil {
					t.Fatalf("%s ran through the swapped link: %q", tc.tool, res.Output)
				}
				if strings.Contains(err.Error(), f.outside) {
					t.Fatalf("%s: the error names the outside: %v", tc.tool, err)
				}
				if _, err := os.Stat(filepath.Join(f.outside, "new.txt")); err == nil {
					t.Fatalf("%s wrote outside the workspace", tc.tool)
				}
				mustOK(t, os.Remove(filepath.Join(f.ws, "src")))
			}
		})
	}
}
