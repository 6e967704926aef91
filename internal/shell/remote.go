package shell

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// What the remote transports (ssh, docker) share: the command that starts the shell, the
// session tag, and the sh scripts they run beside the shell to signal its descendants and to
// kill everything the session started. The local transport does the same in Go with
// internal/procfs; on the far side of ssh or docker exec only a POSIX sh can be assumed, so
// the process tree is read from /proc/*/stat by sh itself (no awk, no pgrep), with `ps -e -o`
// as the fallback where there is no /proc.

// TagVar is the environment variable that marks every process of a remote session: its value
// is a fresh random tag per session, so Close can find the session's processes (also the
// ones that left the shell's process tree, say by double-forking) in /proc/*/environ.
const TagVar = "NEXUS_SHELL_TAG"

// startShellScript is run with `sh -c`: bash when the host has it, else sh itself. `command -v`
// tests first because a failed `exec` ends a non-interactive sh.
const startShellScript = `if command -v bash >/dev/null 2>&1; then exec bash --noprofile --norc; fi; exec sh`

// procTreeFuncs defines two sh functions.
//
//	__nx_table: sets __nx_tab to "pid:ppid pid:ppid ..." for every process.
//	__nx_desc ROOTS: sets __nx_out to the pids below the space-separated ROOTS (not the roots).
//
// comm in /proc/PID/stat may hold spaces and parentheses, so fields are read after the last
// ") ". read is a regular builtin, so a process that vanished mid-scan (its stat cannot be
// opened) costs a skipped line, never the script.
const procTreeFuncs = `set -f; IFS=' 	
'
__nx_table() {
	__nx_tab=
	if [ -r /proc/self/stat ]; then
		set +f
		for __nx_f in /proc/[0-9]*/stat; do
			__nx_l=
			IFS= read -r __nx_l 2>/dev/null <"$__nx_f" || [ -n "$__nx_l" ] || continue
			__nx_p=${__nx_f#/proc/}; __nx_p=${__nx_p%/stat}
			set -f
			set -- ${__nx_l##*) }
			[ $# -ge 2 ] && __nx_tab="$__nx_tab $__nx_p:$2"
		done
		set -f
	else
		__nx_tab=$(ps -e -o pid= -o ppid= 2>/dev/null | while read -r __nx_p __nx_pp; do printf ' %s:%s' "$__nx_p" "$__nx_pp"; done)
	fi
}
__nx_desc() {
	__nx_table
	__nx_set=" $1 "; __nx_out=
	while :; do
		__nx_new=
		for __nx_e in $__nx_tab; do
			__nx_p=${__nx_e%%:*}; __nx_pp=${__nx_e#*:}
			case $__nx_set in
			*" $__nx_pp "*)
				case $__nx_set in
				*" $__nx_p "*) ;;
				*) __nx_set="$__nx_set$__nx_p "; __nx_out="$__nx_out $__nx_p"; __nx_new=1 ;;
				esac ;;
			esac
		done
		[ -n "$__nx_new" ] || break
	done
}
`

// tagFuncs defines __nx_tagged TAG: sets __nx_tg to the pids whose environment holds
// NEXUS_SHELL_TAG=TAG. One grep reads every environ file: with -z, each NUL-separated variable is
// a line. Without -z a grep reads the file as one line, and busybox's stops at its first NUL
// (so it sees only the first variable), hence -z, and the slow way, one file at a time through
// tr, for a grep that lacks -z.
const tagFuncs = `__nx_tagged() {
	__nx_tg=
	set +f
	if printf 'a\0b\0' | grep -z -x -F -e b >/dev/null 2>&1; then
		__nx_fs=$(grep -l -z -x -F -e "` + TagVar + `=$1" /proc/[0-9]*/environ 2>/dev/null)
	else
		__nx_fs=
		for __nx_f in /proc/[0-9]*/environ; do
			tr '\0' '\n' <"$__nx_f" 2>/dev/null | grep -q -x -F -e "` + TagVar + `=$1" && __nx_fs="$__nx_fs $__nx_f"
		done
	fi
	set -f
	for __nx_f in $__nx_fs; do
		__nx_p=${__nx_f#/proc/}; __nx_p=${__nx_p%/environ}
		[ "$__nx_p" = "$$" ] || __nx_tg="$__nx_tg $__nx_p"
	done
}
`

// signalChildrenScript sends sig to every descendant of pid (not to pid itself).
func signalChildrenScript(pid int, sig syscall.Signal) (string, error) {
	if pid <= 1 {
		return "", fmt.Errorf("signal children: invalid shell pid %d", pid)
	}
	name, err := signalName(sig)
	if err != nil {
		return "", err
	}
	return procTreeFuncs + `__nx_desc ` + strconv.Itoa(pid) + `
[ -z "$__nx_out" ] || kill -s ` + name + ` $__nx_out 2>/dev/null
exit 0
`, nil
}

// killSessionScript kills every process of a session: those carrying the tag in their
// environment and all their descendants (also those that cleared the variable). Only the tag
// identifies the session: a remembered pid could have been reused by then. Everything found
// is stopped first, so nothing can fork while the tree is walked again, then killed; the
// later passes take what was forked in between.
func killSessionScript(tag string) string {
	if tag == "" || strings.Trim(tag, "0123456789abcdef") != "" {
		return "exit 1\n" // tags are hex; anything else never reaches a script
	}
	return procTreeFuncs + tagFuncs + `__nx_all=
for __nx_i in 1 2 3; do
	__nx_tagged ` + tag + `
	[ -n "$__nx_tg" ] || break
	__nx_desc "$__nx_tg"
	__nx_now="$__nx_tg $__nx_out"
	kill -s STOP $__nx_now 2>/dev/null
	__nx_all="$__nx_all $__nx_now"
done
[ -z "$__nx_all" ] || kill -s KILL $__nx_all 2>/dev/null
exit 0
`
}

// signalName is the name kill -s takes ("INT" for SIGINT).
func signalName(sig syscall.Signal) (string, error) {
	n := unix.SignalName(sig)
	if !strings.HasPrefix(n, "SIG") {
		return "", fmt.Errorf("unknown signal %d", int(sig))
	}
	return strings.TrimPrefix(n, "SIG"), nil
}

// shQuote quotes s as one POSIX sh word.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnv validates NAME=value pairs bound for a remote command line.
func checkEnv(env []string) error {
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !envNameRE.MatchString(name) {
			return fmt.Errorf("invalid environment entry %q: want NAME=value", kv)
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("environment entry %s holds a NUL byte", name)
		}
	}
	return nil
}

// sanitizeIDPart makes an agent-supplied name safe for a session id and a file name:
// [A-Za-z0-9._-], at most 40 characters, never empty, "." or "..".
func sanitizeIDPart(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			b[i] = '_'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	if s := string(b); s != "" && s != "." && s != ".." {
		return s
	}
	return "_"
}
