package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Checkpoint is one snapshot of a session's workspace, a commit of its shadow repository.
type Checkpoint struct {
	// ID is the commit hash (40 hex digits); any unique prefix of 7 or more works for Restore.
	ID    string `json:"checkpoint_id"`
	Label string `json:"label,omitempty"`
	// Created is when the snapshot was taken, ISO 8601 in UTC, by the clock of the machine the
	// workspace is on.
	Created string `json:"created"`
	// Auto is true for the snapshots taken before commands that are not provably read-only.
	Auto bool `json:"auto"`
	// Command is, for an automatic snapshot, the command it preceded (as the caller passed it,
	// which redacts it first).
	Command string `json:"command,omitempty"`
	// Files is how many files the snapshot holds.
	Files int `json:"files"`
}

// RestoreResult says what a Restore changed.
type RestoreResult struct {
	// CheckpointID is the full id of the checkpoint restored.
	CheckpointID string `json:"checkpoint_id"`
	// BackupID is the checkpoint of the workspace taken just before restoring: restore it to undo.
	BackupID string `json:"backup_checkpoint_id"`
	// FilesRestored counts files written back (changed or deleted since the checkpoint).
	FilesRestored int `json:"files_restored"`
	// FilesRemoved counts files deleted because they were added after the checkpoint.
	FilesRemoved int `json:"files_removed"`
	// Restored and Removed name some of those files (at most maxRestoreNames each).
	Restored []string `json:"restored,omitempty"`
	Removed  []string `json:"removed,omitempty"`
	// Truncated is true when Restored or Removed do not name every file.
	Truncated bool `json:"truncated,omitempty"`
	// Note says what a restore does not undo.
	Note string `json:"note"`
}

// RestoreNote is RestoreResult.Note.
const RestoreNote = "Workspace files were restored; side effects were not undone: processes started, " +
	"databases, network calls, and files outside the workspace or excluded from checkpoints " +
	"(.git, node_modules, target, .venv, __pycache__, dist, build, and secrets such as .env*, *.pem, *.key, id_*, .ssh) " +
	"are as they were before the restore."

// Excluded names are never snapshotted, so restores never write or remove them. ExcludedDirs are
// bulky or tool-owned directories; ExcludedSecrets are credentials. Both are written to the
// shadow repository's info/exclude and, because a workspace .gitignore could negate those with a
// "!" rule, also passed to every `git add` and listing as exclude pathspecs, which nothing can
// negate. Secrets are matched ignoring case.
var (
	ExcludedDirs    = []string{".git", "node_modules", "target", ".venv", "__pycache__", "dist", "build"}
	ExcludedSecrets = []string{".ssh", ".gnupg", ".aws", ".netrc", ".env*", "*.pem", "*.key", "id_*"}
)

const (
	maxLabel        = 200
	maxCommand      = 1000
	maxListed       = 1000
	maxRestoreNames = 50
	maxNamesBytes   = 64 << 10
	markerFile      = "nexus-shadow"
	checkpointKey   = "Nexus-Checkpoint: "
	filesKey        = "Nexus-Files: "
)

// idPattern is what a checkpoint id must look like before it gets anywhere near git: hex only,
// so it can never be read as an option (--output=..., -h), a revision expression (HEAD~1) or
// shell syntax.
var idPattern = regexp.MustCompile(`^[0-9a-f]{7,40}$`)

var fullIDPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ErrNoCheckpoint is returned by Restore for a well-formed id that names no checkpoint of this
// session.
var ErrNoCheckpoint = errors.New("no such checkpoint")

// Checkpointer snapshots one workspace into a shadow git repository of its own (never the
// workspace's .git) and restores it. Every git command runs through Proc.Run, so it works the
// same on this machine, an SSH host or a Docker container. Methods are safe for concurrent use;
// they are serialized.
type Checkpointer struct {
	p         Proc
	workspace string
	gitDir    string
	mu        sync.Mutex
	last      Checkpoint // the newest checkpoint, once known (guarded by mu)
}

// NewCheckpointer returns a Checkpointer for workspace (the directory to snapshot) with its
// shadow repository at gitDir, created on the first snapshot. Both must be absolute, or start
// with "~/" to mean the home directory of the user the shell runs as; gitDir must not be inside
// the workspace (nor the workspace inside it) and must not be named .git. An existing gitDir that
// is neither empty nor a nexus shadow repository is refused at the first snapshot.
func NewCheckpointer(p Proc, workspace, gitDir string) (*Checkpointer, error) {
	if p == nil {
		return nil, errors.New("checkpoints: no shell")
	}
	ws, err := cleanCheckpointPath("workspace", workspace)
	if err != nil {
		return nil, err
	}
	gd, err := cleanCheckpointPath("checkpoint directory", gitDir)
	if err != nil {
		return nil, err
	}
	if ws == "/" {
		return nil, errors.New("checkpoints: the workspace must not be /")
	}
	if path.Base(gd) == ".git" {
		return nil, fmt.Errorf("checkpoints: the checkpoint directory %q must not be a .git directory", gd)
	}
	if cpWithin(gd, ws) || cpWithin(ws, gd) {
		return nil, fmt.Errorf("checkpoints: the checkpoint directory %q and the workspace %q must not contain each other", gd, ws)
	}
	return &Checkpointer{p: p, workspace: ws, gitDir: gd}, nil
}

// Workspace is the directory snapshotted.
func (c *Checkpointer) Workspace() string { return c.workspace }

// GitDir is the shadow repository.
func (c *Checkpointer) GitDir() string { return c.gitDir }

func cleanCheckpointPath(what, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("checkpoints: the %s is empty", what)
	}
	if strings.ContainsAny(p, "\x00\n\r") {
		return "", fmt.Errorf("checkpoints: the %s %q holds a NUL or a line break", what, p)
	}
	if !utf8.ValidString(p) {
		return "", fmt.Errorf("checkpoints: the %s %q is not valid UTF-8", what, p)
	}
	switch {
	case p == "~":
		return p, nil
	case strings.HasPrefix(p, "~/"):
		return "~/" + strings.TrimPrefix(path.Clean("/"+p[2:]), "/"), nil
	case strings.HasPrefix(p, "/"):
		return path.Clean(p), nil
	}
	return "", fmt.Errorf("checkpoints: the %s %q must be an absolute path (or start with ~/)", what, p)
}

// cpWithin reports whether a is b or below it (both cleaned, in the same form).
func cpWithin(a, b string) bool {
	if a == b {
		return true
	}
	if b == "~" {
		return strings.HasPrefix(a, "~/")
	}
	return strings.HasPrefix(a, strings.TrimSuffix(b, "/")+"/")
}

// cpQuote quotes s for sh: the whole value in single quotes, each single quote inside closed,
// escaped with a backslash and reopened.
func cpQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// cpShPath is p as an sh word: a leading ~ becomes "$HOME", the rest is single-quoted.
func cpShPath(p string) string {
	switch {
	case p == "~":
		return `"$HOME"`
	case strings.HasPrefix(p, "~/"):
		return `"$HOME"` + cpQuote(p[1:])
	}
	return cpQuote(p)
}

// cpEnv is the whole environment git sees: no system or global configuration, no GIT_*
// variable of the caller (index, object directory, config overrides, pathspec modes), no
// prompts, the C locale.
const cpEnv = `PATH="$PATH" LC_ALL=C GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 ` +
	`GIT_DIR="$G" GIT_WORK_TREE="$W" G="$G" W="$W"`

// gitFunc defines g, which runs git on the shadow repository with no hooks, no fsmonitor, no
// signing, no line ending conversions, no background maintenance, and an identity of its own.
const gitFunc = `g() {
  git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c commit.gpgSign=false \
    -c user.name=nexus -c user.email=nexus@localhost -c core.autocrlf=false -c core.safecrlf=false \
    -c core.splitIndex=false -c core.sparseCheckout=false -c advice.addEmbeddedRepo=false \
    -c gc.autoDetach=false -c maintenance.auto=false "$@"
}
`

// script wraps body: the outer shell resolves the paths (~ is the remote user's home) and
// re-executes sh under `env -i` with cpEnv and extra NAME='value' words, so the caller's
// environment never reaches git; body runs with g defined and the workspace as the current
// directory. One extra exec per script, not per git call.
func (c *Checkpointer) script(extraEnv, body string) string {
	inner := gitFunc +
		`cd "$W" 2>/dev/null || { echo "nexus: the workspace $W is not a directory" >&2; exit 3; }` + "\n" + body
	home := ""
	if strings.HasPrefix(c.gitDir, "~") || strings.HasPrefix(c.workspace, "~") {
		home = `case $HOME in /?*) ;; *) echo "nexus: HOME is not an absolute path, so ~ cannot be resolved" >&2; exit 3;; esac` + "\n"
	}
	return home + "G=" + cpShPath(c.gitDir) + "\nW=" + cpShPath(c.workspace) + "\n" +
		"exec env -i " + cpEnv + extraEnv + " sh -c " + cpQuote(inner) + "\n"
}

// excludePathspecs are the pathspecs given to every git add and listing so that excluded paths
// are never snapshotted, at any depth, whatever the workspace's .gitignore files say.
func excludePathspecs() string {
	var b strings.Builder
	b.WriteString("-- .")
	add := func(magic, p string) {
		// glob magic: ** spans directories; the patterns have no literal prefix, which also
		// keeps git add from failing over pathspecs that name ignored paths.
		b.WriteString(" " + cpQuote(":("+magic+")**/"+p) + " " + cpQuote(":("+magic+")**/"+p+"/**"))
	}
	for _, p := range ExcludedDirs {
		add("exclude,glob", p)
	}
	for _, p := range ExcludedSecrets {
		add("exclude,glob,icase", p)
	}
	return b.String()
}

// initScript creates the shadow repository unless it exists. A directory that exists, is not
// empty and is not marked as ours is refused, so a user's repository is never taken over.
func initScript() string {
	var lines []string
	lines = append(lines, "# excluded dirs")
	lines = append(lines, ExcludedDirs...)
	lines = append(lines, "# secrets, last so that nothing here can negate them")
	lines = append(lines, ExcludedSecrets...)
	var ex strings.Builder
	for _, l := range lines {
		ex.WriteString(" " + cpQuote(l))
	}
	return `if [ ! -f "$G/` + markerFile + `" ]; then
  if [ -e "$G" ] && [ ! -f "$G/` + markerFile + `.partial" ] && [ -n "$(ls -A "$G" 2>/dev/null)" ]; then
    echo "nexus: $G exists and is not a nexus checkpoint repository; refusing to use it" >&2; exit 3
  fi
  mkdir -p "$G" && chmod 700 "$G" && : > "$G/` + markerFile + `.partial" || exit 3
  Gp=$(cd "$G" && pwd -P) && Wp=$(pwd -P) || exit 3
  case "$Gp/" in "$Wp/"*) echo "nexus: the checkpoint directory $G is inside the workspace $W" >&2; exit 3;; esac
  case "$Wp/" in "$Gp/"*) echo "nexus: the workspace $W is inside the checkpoint directory $G" >&2; exit 3;; esac
  g init --quiet || exit 3
  g config core.hooksPath /dev/null && g config core.fsmonitor false && g config commit.gpgSign false &&
    g config user.name nexus && g config user.email nexus@localhost && g config core.autocrlf false &&
    g config gc.autoDetach false || exit 3
  mkdir -p "$G/info" || exit 3
  printf '%s\n'` + ex.String() + ` > "$G/info/exclude" || exit 3
  printf '%s\n' '* -text -eol -filter -ident -working-tree-encoding -diff -merge' > "$G/info/attributes" || exit 3
  mv -f "$G/` + markerFile + `.partial" "$G/` + markerFile + `" || exit 3
fi
`
}

// staleLocks removes lock files left by a git that was killed (a timed-out call) more than a
// minute ago; calls are serialized, so no live git of ours holds them. Only builtins run when
// there is no lock.
const staleLocks = `for l in "$G/index.lock" "$G/HEAD.lock" "$G"/refs/heads/*.lock; do
  if [ -f "$l" ]; then find "$G" -maxdepth 3 -name '*.lock' -type f -mmin +1 -exec rm -f {} + 2>/dev/null; break; fi
done
`

// logFormat prints one record per commit: RS, hash, US, committer date, US, raw message.
const logFormat = `--format=%x1e%H%x1f%cI%x1f%B`

type checkpointMeta struct {
	Label   string `json:"label,omitempty"`
	Auto    bool   `json:"auto"`
	Command string `json:"command,omitempty"`
}

// Snapshot records the workspace as a new checkpoint. label names it; auto marks the automatic
// snapshots taken before a command, which is passed (already redacted) as command. An automatic
// snapshot of a workspace identical to the newest checkpoint makes no new commit and returns
// that checkpoint.
func (c *Checkpointer) Snapshot(ctx context.Context, label string, auto bool, command string) (Checkpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshot(ctx, label, auto, command)
}

func (c *Checkpointer) snapshot(ctx context.Context, label string, auto bool, command string) (Checkpoint, error) {
	cp := Checkpoint{Label: cpClip(label, maxLabel), Auto: auto, Command: cpClip(command, maxCommand)}
	meta, err := json.Marshal(checkpointMeta{Label: cp.Label, Auto: cp.Auto, Command: cp.Command})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	subject := "nexus checkpoint"
	autoFlag := "0"
	if auto {
		subject, autoFlag = "nexus automatic checkpoint", "1"
	}
	now := time.Now().UTC()
	cp.Created = now.Format("2006-01-02T15:04:05Z")
	date := cpQuote("@" + strconv.FormatInt(now.Unix(), 10) + " +0000")
	body := initScript() + staleLocks + `S=` + cpQuote(subject) + `
M=` + cpQuote(checkpointKey+string(meta)) + `
# Unreadable files are left out (exit 1 with --ignore-errors) rather than failing the snapshot.
g add -A --ignore-errors ` + excludePathspecs() + `
[ $? -le 1 ] || exit 3
head=$(g rev-parse --verify --quiet HEAD) || head=
if [ -n "$head" ] && [ ` + autoFlag + ` = 1 ] && g diff-index --cached --quiet "$head" --; then
  echo "same $head"; exit 0
fi
n=$(g ls-files | wc -l) || exit 3
n=${n##* }
tree=$(g write-tree) || exit 3
commit=$(g commit-tree "$tree" ${head:+-p "$head"} -m "$S" -m "$M
` + filesKey + `$n") || exit 3
g update-ref -m nexus HEAD "$commit" "$head" || exit 3
echo "new $commit $n"
`
	out, err := c.p.Run(ctx, c.script(" GIT_COMMITTER_DATE="+date+" GIT_AUTHOR_DATE="+date, body), nil)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint of %s: %w", c.workspace, err)
	}
	f := strings.Fields(string(out))
	switch {
	case len(f) == 3 && f[0] == "new" && fullIDPattern.MatchString(f[1]):
		cp.ID = f[1]
		if cp.Files, err = strconv.Atoi(f[2]); err != nil {
			break
		}
		c.last = cp
		return cp, nil
	case len(f) == 2 && f[0] == "same" && fullIDPattern.MatchString(f[1]):
		if c.last.ID == f[1] {
			return c.last, nil
		}
		cps, err := c.log(ctx, f[1], 1)
		if err != nil {
			return Checkpoint{}, fmt.Errorf("checkpoint of %s: %w", c.workspace, err)
		}
		if len(cps) == 1 {
			c.last = cps[0]
			return cps[0], nil
		}
	}
	return Checkpoint{}, fmt.Errorf("checkpoint of %s: unexpected git output %q", c.workspace, cpClip(string(out), 200))
}

// log reads up to n checkpoints from rev (a full hash, or HEAD), newest first; none when the
// repository or its history does not exist yet.
func (c *Checkpointer) log(ctx context.Context, rev string, n int) ([]Checkpoint, error) {
	body := `[ -f "$G/` + markerFile + `" ] || exit 0
g rev-parse --verify --quiet HEAD >/dev/null || exit 0
g log -n ` + strconv.Itoa(n) + ` '` + logFormat + `' ` + cpQuote(rev) + ` -- || exit 3
`
	out, err := c.p.Run(ctx, c.script("", body), nil)
	if err != nil {
		return nil, err
	}
	return parseCheckpointLog(out), nil
}

// List returns the session's checkpoints, newest first (at most the newest 1000).
func (c *Checkpointer) List(ctx context.Context) ([]Checkpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cps, err := c.log(ctx, "HEAD", maxListed)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of %s: %w", c.workspace, err)
	}
	if cps == nil {
		cps = []Checkpoint{}
	}
	return cps, nil
}

// ValidateCheckpointID checks that id can only be a commit hash (7 to 40 lowercase hex digits),
// before anything runs.
func ValidateCheckpointID(id string) error {
	if id == "" {
		return errors.New("checkpoint_id is empty: pass an id from session_checkpoints")
	}
	if !idPattern.MatchString(id) {
		return fmt.Errorf("checkpoint_id %q is not a checkpoint id: expected 7 to 40 lowercase hex digits from session_checkpoints", cpClip(id, 80))
	}
	return nil
}

// Restore brings the workspace back to checkpoint id: files changed or deleted since are
// written back and files added since are removed. Excluded paths (ExcludedDirs,
// ExcludedSecrets) and files ignored by the workspace's .gitignore that were never snapshotted
// are neither written nor removed. The workspace is first snapshotted (RestoreResult.BackupID),
// so a restore can itself be undone. Side effects are not undone; RestoreResult.Note says so.
func (c *Checkpointer) Restore(ctx context.Context, id string) (RestoreResult, error) {
	if err := ValidateCheckpointID(id); err != nil {
		return RestoreResult{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()

	// Resolve the id to a commit on this session's checkpoint history. The id is hex, so it
	// cannot be an option or a revision expression; quoting keeps the shell out of it too.
	verify := c.script("", `ID=`+cpQuote(id+"^{commit}")+`
[ -f "$G/`+markerFile+`" ] || { echo none; exit 0; }
g rev-parse --verify --quiet HEAD >/dev/null || { echo none; exit 0; }
full=$(g rev-parse --verify --quiet --end-of-options "$ID" 2>/dev/null ||
  g rev-parse --verify --quiet "$ID" 2>/dev/null) || { echo unknown; exit 0; }
g merge-base --is-ancestor "$full" HEAD 2>/dev/null || { echo unknown; exit 0; }
echo "ok $full"
`)
	out, err := c.p.Run(ctx, verify, nil)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restore %s: %w", id, err)
	}
	status := strings.TrimSpace(string(out))
	full, ok := strings.CutPrefix(status, "ok ")
	switch {
	case status == "none":
		return RestoreResult{}, fmt.Errorf("restore %s: %w: this session has no checkpoints yet", id, ErrNoCheckpoint)
	case status == "unknown":
		return RestoreResult{}, fmt.Errorf("restore %s: %w in this session; session_checkpoints lists them", id, ErrNoCheckpoint)
	case !ok || !fullIDPattern.MatchString(full):
		return RestoreResult{}, fmt.Errorf("restore %s: unexpected git output %q", id, cpClip(status, 200))
	}

	backup, err := c.snapshot(ctx, "before restoring "+full[:12], true, "")
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restore %s: snapshot before restoring: %w", id, err)
	}
	if !fullIDPattern.MatchString(backup.ID) {
		return RestoreResult{}, fmt.Errorf("restore %s: unexpected backup id %q", id, backup.ID)
	}

	// The index now holds the backup's tree (the workspace as it is). read-tree -u --reset moves
	// it to the checkpoint's tree and updates exactly the files that differ: files only in the
	// backup (added since) are removed, and only those; nothing excluded is ever in the index.
	apply := c.script("", staleLocks+`B=`+cpQuote(backup.ID)+`
F=`+cpQuote(full)+`
r=$(g diff-tree -r --no-renames --name-only --diff-filter=AMT "$B" "$F" | wc -l) || exit 3
d=$(g diff-tree -r --no-renames --name-only --diff-filter=D "$B" "$F" | wc -l) || exit 3
echo $r $d
g diff-tree -r --no-renames -z --name-status "$B" "$F" | head -c `+strconv.Itoa(maxNamesBytes)+`
g read-tree --reset -u "$F" || exit 3
`)
	out, err = c.p.Run(ctx, apply, nil)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restore %s: %w (the workspace as it was is checkpoint %s)", id, err, backup.ID)
	}
	res := RestoreResult{CheckpointID: full, BackupID: backup.ID, Note: RestoreNote}
	head, names, _ := bytes.Cut(out, []byte("\n"))
	if f := strings.Fields(string(head)); len(f) == 2 {
		res.FilesRestored, _ = strconv.Atoi(f[0])
		res.FilesRemoved, _ = strconv.Atoi(f[1])
	}
	fields := strings.Split(string(names), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		st, name := fields[i], fields[i+1]
		if i+2 >= len(fields) && len(names) >= maxNamesBytes {
			break // possibly cut short
		}
		switch {
		case st == "D":
			if len(res.Removed) < maxRestoreNames {
				res.Removed = append(res.Removed, name)
			}
		case st != "":
			if len(res.Restored) < maxRestoreNames {
				res.Restored = append(res.Restored, name)
			}
		}
	}
	res.Truncated = len(res.Restored) < res.FilesRestored || len(res.Removed) < res.FilesRemoved
	return res, nil
}

// parseCheckpointLog reads records printed with logFormat.
func parseCheckpointLog(out []byte) []Checkpoint {
	var cps []Checkpoint
	for _, rec := range strings.Split(string(out), "\x1e") {
		f := strings.SplitN(rec, "\x1f", 3)
		if len(f) != 3 || !fullIDPattern.MatchString(f[0]) {
			continue
		}
		cp := Checkpoint{ID: f[0], Created: strings.TrimSpace(f[1])}
		if t, err := time.Parse(time.RFC3339, cp.Created); err == nil {
			cp.Created = t.UTC().Format("2006-01-02T15:04:05Z")
		}
		for _, line := range strings.Split(f[2], "\n") {
			switch {
			case strings.HasPrefix(line, checkpointKey):
				var m checkpointMeta
				if json.Unmarshal([]byte(strings.TrimPrefix(line, checkpointKey)), &m) == nil {
					cp.Label, cp.Auto, cp.Command = m.Label, m.Auto, m.Command
				}
			case strings.HasPrefix(line, filesKey):
				cp.Files, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, filesKey)))
			}
		}
		cps = append(cps, cp)
	}
	return cps
}

// cpClip cuts s to at most n bytes without splitting a character.
func cpClip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
