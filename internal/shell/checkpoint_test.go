package shell

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// checkpointFixture starts a real local shell and a Checkpointer over a fresh workspace.
func checkpointFixture(t *testing.T, wsName string) (*Checkpointer, string, Proc) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("checkpoint tests need git on PATH: " + err.Error())
	}
	root := t.TempDir()
	ws := filepath.Join(root, wsName)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := (&Local{Dir: root}).Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := NewCheckpointer(p, ws, filepath.Join(root, "state dir 'q\" $(x)", "shadow", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	return c, ws, p
}

func cpWriteFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func cpReadFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func cpExists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}

func cpCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCheckpointRoundTrip(t *testing.T) {
	c, ws, _ := checkpointFixture(t, "work space 'q\" $x")
	ctx := cpCtx(t)
	cpWriteFile(t, filepath.Join(ws, "keep.txt"), "original\n")
	cpWriteFile(t, filepath.Join(ws, "gone.txt"), "will be deleted\n")
	cpWriteFile(t, filepath.Join(ws, "dir with space", "it's.txt"), "quoted\n")
	cpWriteFile(t, filepath.Join(ws, "crlf.txt"), "a\r\nb\r\n")
	cpWriteFile(t, filepath.Join(ws, ".gitattributes"), "* text eol=crlf\n*.txt filter=evil\n")
	// Excluded without any workspace .gitignore: never snapshotted, never removed.
	cpWriteFile(t, filepath.Join(ws, ".env"), "SECRET=1\n")
	cpWriteFile(t, filepath.Join(ws, "node_modules", "m", "index.js"), "x\n")

	cp, err := c.Snapshot(ctx, "first", false, "")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(cp.ID) || cp.Label != "first" || cp.Auto || cp.Files != 5 {
		t.Fatalf("snapshot = %+v", cp)
	}
	if _, err := time.Parse("2006-01-02T15:04:05Z", cp.Created); err != nil {
		t.Fatalf("created %q: %v", cp.Created, err)
	}

	// Change things: modify, delete, add (also in a new directory).
	cpWriteFile(t, filepath.Join(ws, "keep.txt"), "modified\n")
	cpWriteFile(t, filepath.Join(ws, "dir with space", "it's.txt"), "changed\n")
	if err := os.Remove(filepath.Join(ws, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	cpWriteFile(t, filepath.Join(ws, "new.txt"), "new\n")
	cpWriteFile(t, filepath.Join(ws, "newdir", "deep", "n.txt"), "new\n")

	res, err := c.Restore(ctx, cp.ID[:7])
	if err != nil {
		t.Fatal(err)
	}
	if got := cpReadFile(t, filepath.Join(ws, "keep.txt")); got != "original\n" {
		t.Errorf("keep.txt = %q", got)
	}
	if got := cpReadFile(t, filepath.Join(ws, "gone.txt")); got != "will be deleted\n" {
		t.Errorf("gone.txt = %q", got)
	}
	if got := cpReadFile(t, filepath.Join(ws, "dir with space", "it's.txt")); got != "quoted\n" {
		t.Errorf("it's.txt = %q", got)
	}
	if got := cpReadFile(t, filepath.Join(ws, "crlf.txt")); got != "a\r\nb\r\n" {
		t.Errorf("crlf.txt = %q (attributes must not convert)", got)
	}
	for _, n := range []string{".env", "node_modules/m/index.js"} {
		if !cpExists(filepath.Join(ws, n)) {
			t.Errorf("restore removed %s", n)
		}
	}
	for _, n := range []string{"new.txt", "newdir"} {
		if cpExists(filepath.Join(ws, n)) {
			t.Errorf("%s still exists after restore", n)
		}
	}
	if res.CheckpointID != cp.ID || res.FilesRestored != 3 || res.FilesRemoved != 2 || res.Truncated {
		t.Errorf("restore result = %+v", res)
	}
	if !strings.Contains(strings.Join(res.Removed, ","), "newdir/deep/n.txt") || !strings.Contains(strings.Join(res.Restored, ","), "gone.txt") {
		t.Errorf("restore names = %+v", res)
	}
	if !strings.Contains(res.Note, "side effects") {
		t.Errorf("note = %q", res.Note)
	}

	// The backup undoes the restore.
	if _, err := c.Restore(ctx, res.BackupID); err != nil {
		t.Fatal(err)
	}
	if got := cpReadFile(t, filepath.Join(ws, "keep.txt")); got != "modified\n" {
		t.Errorf("after undo keep.txt = %q", got)
	}
	if cpExists(filepath.Join(ws, "gone.txt")) || !cpExists(filepath.Join(ws, "newdir", "deep", "n.txt")) {
		t.Error("undoing the restore did not bring the later state back")
	}
}

func TestCheckpointListAndAutoUnchanged(t *testing.T) {
	c, ws, _ := checkpointFixture(t, "ws")
	ctx := cpCtx(t)

	list, err := c.List(ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("empty list = %v, %v", list, err)
	}
	cpWriteFile(t, filepath.Join(ws, "a"), "1")
	first, err := c.Snapshot(ctx, "manual one", false, "")
	if err != nil {
		t.Fatal(err)
	}
	auto1, err := c.Snapshot(ctx, "", true, "rm -rf build")
	if err != nil {
		t.Fatal(err)
	}
	if auto1.ID != first.ID {
		t.Errorf("automatic snapshot of an unchanged tree made a new checkpoint %+v (newest %+v)", auto1, first)
	}
	cpWriteFile(t, filepath.Join(ws, "b"), "2")
	auto2, err := c.Snapshot(ctx, "", true, "make\nall")
	if err != nil {
		t.Fatal(err)
	}
	if auto2.ID == first.ID || !auto2.Auto || auto2.Command != "make\nall" || auto2.Files != 2 {
		t.Errorf("auto2 = %+v", auto2)
	}
	// A manual snapshot is always recorded, even when nothing changed.
	second, err := c.Snapshot(ctx, `label "with" quotes`, false, "")
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == auto2.ID {
		t.Error("manual snapshot of an unchanged tree was not recorded")
	}

	list, err = c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("list = %+v", list)
	}
	want := []Checkpoint{second, auto2, first}
	for i := range want {
		if list[i] != want[i] {
			t.Errorf("list[%d] = %+v, want %+v", i, list[i], want[i])
		}
	}
	if list[0].Label != `label "with" quotes` || list[0].Auto || !list[1].Auto || list[2].Label != "manual one" {
		t.Errorf("labels/auto flags wrong: %+v", list)
	}
}

func TestCheckpointOptionInjectionIDsRefused(t *testing.T) {
	c, ws, _ := checkpointFixture(t, "ws")
	ctx := cpCtx(t)
	cpWriteFile(t, filepath.Join(ws, "a"), "1")
	if _, err := c.Snapshot(ctx, "x", false, ""); err != nil {
		t.Fatal(err)
	}
	// A Proc that records every script proves that nothing runs for a bad id.
	rec := &cpRecordingProc{Proc: c.p}
	c.p = rec
	bad := []string{"--help", "-h", "HEAD", "HEAD~1", "../x", "abc; rm -rf /", "$(id)", "deadbeefz",
		"", "--output=/tmp/x", "DEADBEEF", "abc123", "0123456789012345678901234567890123456789a", "dead beef",
		"deadbeef\n", "-deadbeef", "deadbeef^{tree}"}
	for _, id := range bad {
		_, err := c.Restore(ctx, id)
		if err == nil {
			t.Errorf("Restore(%q) succeeded", id)
			continue
		}
		if !strings.Contains(err.Error(), "checkpoint_id") {
			t.Errorf("Restore(%q) error %q does not name checkpoint_id", id, err)
		}
	}
	if rec.n != 0 {
		t.Fatalf("%d scripts ran for invalid ids", rec.n)
	}

	// Well-formed but unknown.
	_, err := c.Restore(ctx, "deadbeefdeadbeef")
	if !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), "session_checkpoints") {
		t.Errorf("unknown id error = %v", err)
	}
	if rec.n != 1 {
		t.Errorf("unknown id ran %d scripts, want only the lookup", rec.n)
	}
	if got := cpReadFile(t, filepath.Join(ws, "a")); got != "1" {
		t.Errorf("workspace changed: %q", got)
	}
}

type cpRecordingProc struct {
	Proc
	n int
}

func (r *cpRecordingProc) Run(ctx context.Context, script string, stdin []byte) ([]byte, error) {
	r.n++
	return r.Proc.Run(ctx, script, stdin)
}

func TestCheckpointRestoreNoCheckpointsYet(t *testing.T) {
	c, _, _ := checkpointFixture(t, "ws")
	_, err := c.Restore(cpCtx(t), "deadbeef")
	if !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("err = %v", err)
	}
}

func TestCheckpointExcludes(t *testing.T) {
	c, ws, _ := checkpointFixture(t, "ws")
	ctx := cpCtx(t)
	// The workspace tries to un-ignore everything.
	cpWriteFile(t, filepath.Join(ws, ".gitignore"), "!.env\n!*.pem\n!node_modules\n!id_*\n!.ssh\n!build\n*.log\n")
	cpWriteFile(t, filepath.Join(ws, "sub", ".gitignore"), "!.env.local\n!*.key\n")
	cpWriteFile(t, filepath.Join(ws, "src.go"), "package x\n")
	secrets := []string{".env", ".env.local", "sub/.env.local", "sub/deep/.ENV", "cert.pem", "sub/server.key",
		"id_ed25519", "sub/id_rsa", ".ssh/config", "sub/.aws/credentials", ".netrc", ".gnupg/x", "x.PEM"}
	bulky := []string{"node_modules/m/index.js", "sub/node_modules/x.js", "target/debug/bin", ".venv/lib/x.py",
		"__pycache__/a.pyc", "dist/app.js", "sub/build/out.o"}
	ignored := []string{"debug.log"}
	all := append(append(append([]string{}, secrets...), bulky...), ignored...)
	for _, n := range all {
		cpWriteFile(t, filepath.Join(ws, n), "secret "+n)
	}
	cp, err := c.Snapshot(ctx, "x", false, "")
	if err != nil {
		t.Fatal(err)
	}
	if cp.Files != 3 { // .gitignore, sub/.gitignore, src.go
		t.Errorf("files = %d, want 3", cp.Files)
	}
	out, err := exec.Command("git", "--git-dir="+c.gitDir, "ls-tree", "-r", "--name-only", cp.ID).CombinedOutput()
	if err != nil {
		t.Fatal(err, string(out))
	}
	if strings.TrimSpace(string(out)) != ".gitignore\nsrc.go\nsub/.gitignore" {
		t.Errorf("snapshot holds:\n%s", out)
	}
	// Files appear later too, and a restore must neither remove nor rewrite any of them.
	later := []string{".env.production", "node_modules/late.js", "later.pem", "new/.env"}
	for _, n := range later {
		cpWriteFile(t, filepath.Join(ws, n), "later "+n)
	}
	cpWriteFile(t, filepath.Join(ws, "new", "plain.txt"), "removed on restore")
	if _, err := c.Restore(ctx, cp.ID); err != nil {
		t.Fatal(err)
	}
	for _, n := range append(all, later...) {
		if !cpExists(filepath.Join(ws, n)) {
			t.Errorf("restore removed %s, which was never snapshotted", n)
		}
	}
	if cpExists(filepath.Join(ws, "new", "plain.txt")) {
		t.Error("restore kept new/plain.txt")
	}
	// The backup taken before restoring does not hold them either.
	out, err = exec.Command("git", "--git-dir="+c.gitDir, "ls-tree", "-r", "--name-only", "HEAD").CombinedOutput()
	if err != nil {
		t.Fatal(err, string(out))
	}
	if strings.Contains(string(out), "env") || strings.Contains(string(out), "node_modules") || strings.Contains(string(out), "pem") {
		t.Errorf("backup holds excluded files:\n%s", out)
	}
	// info/exclude lists secrets last.
	ex := cpReadFile(t, filepath.Join(c.gitDir, "info", "exclude"))
	if !strings.HasSuffix(strings.TrimSpace(ex), "id_*") || strings.Index(ex, ".env*") < strings.Index(ex, "node_modules") {
		t.Errorf("info/exclude:\n%s", ex)
	}
}

func TestCheckpointUserGitUntouched(t *testing.T) {
	c, ws, _ := checkpointFixture(t, "ws")
	ctx := cpCtx(t)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=u", "GIT_AUTHOR_EMAIL=u@x", "GIT_COMMITTER_NAME=u", "GIT_COMMITTER_EMAIL=u@x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	cpWriteFile(t, filepath.Join(ws, "f.txt"), "v1\n")
	git("add", "f.txt")
	git("commit", "-q", "-m", "user commit")
	// A hook that would prove git ran hooks from the workspace.
	hook := filepath.Join(ws, ".git", "hooks", "pre-commit")
	cpWriteFile(t, hook, "#!/bin/sh\ntouch "+filepath.Join(ws, "HOOK_RAN")+"\n")
	if err := os.Chmod(hook, 0o755); err != nil {
		t.Fatal(err)
	}
	git("config", "core.hooksPath", filepath.Join(ws, ".git", "hooks"))
	snap := func() map[string][]byte {
		m := map[string][]byte{}
		for _, n := range []string{"HEAD", "index", "config", "refs/heads/master", "refs/heads/main"} {
			b, _ := os.ReadFile(filepath.Join(ws, ".git", n))
			m[n] = b
		}
		return m
	}
	before := snap()
	cpWriteFile(t, filepath.Join(ws, "f.txt"), "v2\n")
	cp, err := c.Snapshot(ctx, "", false, "")
	if err != nil {
		t.Fatal(err)
	}
	cpWriteFile(t, filepath.Join(ws, "f.txt"), "v3\n")
	if _, err := c.Restore(ctx, cp.ID); err != nil {
		t.Fatal(err)
	}
	if got := cpReadFile(t, filepath.Join(ws, "f.txt")); got != "v2\n" {
		t.Errorf("f.txt = %q", got)
	}
	after := snap()
	for k := range before {
		if !bytes.Equal(before[k], after[k]) {
			t.Errorf("user's .git/%s changed", k)
		}
	}
	if cpExists(filepath.Join(ws, "HOOK_RAN")) {
		t.Error("a workspace hook ran")
	}
	if st := git("status", "--porcelain"); st != " M f.txt\n" {
		t.Errorf("user's git status after restore:\n%s", st)
	}
}

func TestCheckpointRefusesForeignGitDir(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git on PATH")
	}
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	other := filepath.Join(root, "notours")
	cpWriteFile(t, filepath.Join(ws, "a"), "1")
	cpWriteFile(t, filepath.Join(other, "precious"), "keep")
	p, err := (&Local{Dir: root}).Start(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := NewCheckpointer(p, ws, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(cpCtx(t), "", false, ""); err == nil || !strings.Contains(err.Error(), "not a nexus checkpoint repository") {
		t.Errorf("err = %v", err)
	}
	if ents, _ := os.ReadDir(other); len(ents) != 1 {
		t.Errorf("foreign directory was written: %v", ents)
	}
	// Through a symlink, the checkpoint directory is inside the workspace.
	link := filepath.Join(root, "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	c, err = NewCheckpointer(p, ws, filepath.Join(link, "shadow"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(cpCtx(t), "", false, ""); err == nil || !strings.Contains(err.Error(), "inside the workspace") {
		t.Errorf("err = %v", err)
	}
}

func TestNewCheckpointerValidation(t *testing.T) {
	var p Proc = &cpRecordingProc{}
	bad := [][2]string{
		{"relative", "/g"}, {"/ws", "relative"}, {"", "/g"}, {"/ws", ""}, {"/ws\n", "/g"}, {"/ws", "/g\x00"},
		{"/ws", "/ws/.shadow"}, {"/ws", "/ws"}, {"/a/ws", "/a"}, {"/ws", "/home/u/proj/.git"}, {"/", "/g"},
		{"~", "~/.cache/nexus/shadow/s"}, {"~/p", "~/p/x"}, {"/ws", "/ws/../ws/x"},
	}
	for _, b := range bad {
		if _, err := NewCheckpointer(p, b[0], b[1]); err == nil {
			t.Errorf("NewCheckpointer(%q, %q) accepted", b[0], b[1])
		}
	}
	good := [][2]string{{"/ws", "/var/lib/nexus/shadow/s1"}, {"~/proj", "~/.cache/nexus/shadow/s1"}, {"/w s/'q'", "/g h/\"x\""}, {"/ws2", "/ws"}}
	for _, g := range good {
		if _, err := NewCheckpointer(p, g[0], g[1]); err != nil {
			t.Errorf("NewCheckpointer(%q, %q): %v", g[0], g[1], err)
		}
	}
	if cpShPath("~/a'b") != `"$HOME"'/a'\''b'` {
		t.Errorf("cpShPath = %s", cpShPath("~/a'b"))
	}
}

func TestCheckpointHomeRelative(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git on PATH")
	}
	home := t.TempDir()
	cpWriteFile(t, filepath.Join(home, "proj", "a.txt"), "1")
	p, err := (&Local{Dir: home, Env: append(os.Environ(), "HOME="+home)}).Start(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := NewCheckpointer(p, "~/proj", "~/.cache/nexus/shadow/s1")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := c.Snapshot(cpCtx(t), "", false, "")
	if err != nil || cp.Files != 1 {
		t.Fatalf("%+v %v", cp, err)
	}
	if !cpExists(filepath.Join(home, ".cache", "nexus", "shadow", "s1", "HEAD")) {
		t.Error("shadow repository not under $HOME")
	}
}

// Checkpoints of a Docker session: git runs inside the container (the bookworm image has it),
// on a workspace and a shadow repository only the container sees; an image without git gets a
// clear error.
func TestCheckpointDocker(t *testing.T) {
	t.Parallel()
	e := requireDocker(t)
	// No deadline: a loaded machine may take long for all these docker execs; -timeout guards
	// against a hang.
	ctx := context.Background()
	d, _ := e.transport(t, e.container(t, "bookworm"))
	sh, err := Start(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Close() }()
	run := func(cmd string) string {
		t.Helper()
		res, out, errs := remoteRun(t, sh, cmd, patient)
		if res.ExitCode != 0 {
			t.Fatalf("%q: %+v %q", cmd, res, errs)
		}
		return out
	}
	ws := "/work space/it's"
	run(`mkdir -p "` + ws + `/dir" && cd "` + ws + `" && printf 'original\n' > keep.txt && printf 'doomed\n' > gone.txt && printf 'nested\n' > dir/n.txt && printf 'S=1\n' > .env`)
	c, err := NewCheckpointer(sh.Proc(), ws, "~/.cache/nexus/shadow/s1")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := c.Snapshot(ctx, "first", false, "")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(cp.ID) || cp.Label != "first" || cp.Files != 3 {
		t.Fatalf("snapshot = %+v", cp)
	}
	// The shadow repository is in the container user's home, not on this machine.
	if out := run(`test -f ~/.cache/nexus/shadow/s1/HEAD && echo in-container`); out != "in-container\n" {
		t.Fatalf("shadow repository: %q", out)
	}
	run(`printf 'modified\n' > keep.txt && rm gone.txt && printf 'new\n' > added.txt && mkdir -p newdir && printf 'x\n' > newdir/x.txt`)
	res, err := c.Restore(ctx, cp.ID[:7])
	if err != nil {
		t.Fatal(err)
	}
	if res.CheckpointID != cp.ID || res.FilesRestored != 2 || res.FilesRemoved != 2 {
		t.Errorf("restore result = %+v", res)
	}
	if out := run(`cat keep.txt gone.txt dir/n.txt .env; ls`); out != "original\ndoomed\nnested\nS=1\ndir\ngone.txt\nkeep.txt\n" {
		t.Fatalf("after restore: %q", out)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 2 || list[1].ID != cp.ID || list[0].ID != res.BackupID {
		t.Fatalf("list = %+v, %v", list, err)
	}
	// The backup taken before restoring undoes it.
	if _, err := c.Restore(ctx, res.BackupID); err != nil {
		t.Fatal(err)
	}
	if out := run(`cat keep.txt added.txt newdir/x.txt; test -e gone.txt || echo no-gone`); out != "modified\nnew\nx\nno-gone\n" {
		t.Fatalf("after undoing the restore: %q", out)
	}

	// No git in the image: a clear error, nothing else.
	d2, _ := e.transport(t, e.container(t, "busybox"))
	sh2, err := Start(ctx, d2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh2.Close() }()
	remoteRun(t, sh2, "mkdir -p /ws", patient)
	c2, err := NewCheckpointer(sh2.Proc(), "/ws", "~/.cache/nexus/shadow/s2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.Snapshot(ctx, "", false, "")
	t.Logf("snapshot without git: %v", err)
	if err == nil || !strings.Contains(err.Error(), "git") {
		t.Fatalf("snapshot without git: %v", err)
	}
}
