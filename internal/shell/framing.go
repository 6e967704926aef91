package shell

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// The framing. Each command is delivered as data, never as shell source: a fixed loop reads the
// command with the `read` builtin, then evals it in the current shell (so cd, exports and
// functions persist) with stdin from /dev/null. After it, the loop reads the command's token and
// prints a trailer on stdout (token, exit code, $PWD) and a marker on stderr. The parser accepts
// only trailers carrying the command's token, so output that imitates a marker is just output.
// The loop keeps the user's xtrace/verbose flags off around itself and restores them inside the
// eval, so `set -x` traces only the user's command; the eval sits left of `||`, so `set -e`
// cannot kill the session. Everything is POSIX sh with bash fast paths (`read -u`, `read -N`), so
// the same framing drives bash, dash and busybox sh, locally, over SSH and in Docker.
//
// The user's command runs in the same shell as the loop, so it can read and write every variable
// and function of the loop. Three things keep it from reaching the loop's state:
//   - No secret lives in the shell while a command runs. Each command has a fresh random token,
//     which the engine sends after the command and the loop reads only once the eval returned;
//     the loop then clears it. Until then it waits in the command stream, which the eval runs
//     with closed (62<&- / 9<&-: not inherited by the command's programs, not readable by its
//     builtins under that number, and restored afterwards even if the command reopened it).
//   - Nothing the loop evaluates comes from a variable: it reads the command and the token afresh
//     from the stream every time, its output formats are literals in the function bodies, and it
//     does no arithmetic.
//   - A session with a policy refuses commands that name the loop's variables and functions (they
//     start with policy.ReservedPrefix), replace the builtins it calls, or open a process's file
//     descriptors by path (see internal/shell/policy).
// Without a policy a command can still break its own session (redefine `printf`, close fd 62),
// which ends or hangs the session, not more.

// tokenLen is the length of a command's token: 12 random bytes in hex.
const tokenLen = 24

// newToken returns a fresh random token (a command's, a delimiter, a transport's tag).
func newToken() string {
	b := make([]byte, tokenLen/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rs separates trailer fields; it cannot start a forged trailer because the token follows it.
const rs = "\x1e"

// bootstrap is sent once when the shell starts. It defines the halves of the loop as functions;
// startLine then moves the command stream off stdin, makes /dev/null the shell's stdin (so every
// command reads EOF rather than hanging, with no redirection per command) and runs the command
// loop at top level: the shell parses the loop once, and each command costs it only reading its
// own bytes. The user's command is evaluated by the loop body, at top level, never inside a
// function, so `declare`, `return` and the positional parameters mean what they mean at a
// prompt. A one-trip inner loop absorbs a user's `break`/`continue`.
//
// Per command the engine sends (see message): to bash, the command, a NUL (a command cannot hold
// one, so bash takes it whole with one `read -d ""`) and the token, which `read -N` takes in one
// read; to other shells, a fresh random delimiter line, the command's lines, the delimiter again
// and the token on a line of its own.
//
// The trailer's format is a literal: \036 is rs.
const bootstrap = `command set +m 2>/dev/null; [ -n "$BASH_VERSION" ] && set +o history; unset HISTFILE; ` +
	`__nx_f=$-; __nx_r=0; __nx_t=; __nx_c=; export GIT_TERMINAL_PROMPT=0 PAGER=cat GIT_PAGER=cat DEBIAN_FRONTEND=noninteractive
__nx_trace() { case $__nx_f in *x*) __nx_c="set -x
$__nx_c";; esac; case $__nx_f in *v*) __nx_c="set -v
$__nx_c";; esac; }
__nx_out() { printf '\036NX%s\036%s\036%s\036%s\036NX%s\n' "$__nx_t" "$__nx_r" "$1" "$PWD" "$__nx_t"; }
__nx_ready() { __nx_r=$$; __nx_out "$1"; printf '\036NX%s\n' "$__nx_t" >&2; __nx_t=; }
__nx_tok() { IFS= read -r __nx_t <&9; }
__nx_post() { __nx_f=$-; set +xv; __nx_tok; printf '\036NX%s\n' "$__nx_t" >&3; __nx_out -; __nx_t=; }
__nx_fast() { __nx_f=$-; __nx_tok; printf '\036NX%s\n' "$__nx_t" >&2; __nx_out -; __nx_t=; }
`

// startLine starts the command loop, after telling the engine that the shell is ready (see
// readyLine). The answer is given inside the compound command that holds the loop, which the
// shell has read whole before it runs any of it: the engine sends the first command only after
// the answer, so no shell (busybox ash reads its input in 1 KB chunks) can have read part of
// that command as script text.
//
// While a command runs, the command stream must be out of its reach. bash (4.1 and later) keeps
// it, for the whole loop, on the descriptor where bash saves fd 62 when it runs the loop's
// compound command with 62 closed: bash marks that copy close-on-exec, so no program a command
// starts inherits it, and no redirection per command is paid for. The descriptor's number is the
// lowest free one from 10 up, which `exec {var}` finds just before; the loop's text is then
// evaluated with that number written in. Other shells (dash, busybox ash, older bash) read the
// stream on fd 9 and run each command with fd 9 closed (`9<&-`), which they restore afterwards.
// A policy refuses commands that name descriptors from 10 up (see internal/shell/policy).
//
// After the user's command, when tracing is on (the user ran `set -x`), the closing half runs
// with stderr to /dev/null so the trace shows only the user's own commands; otherwise it runs
// without any redirection. bash evals directly (a syntax error in eval never ends a bash that is
// not in POSIX mode); other shells use `command eval`, which keeps eval's errors from ending the
// shell. Should the loop end anyway (`break 2`, a closed command descriptor), the shell reads its
// next command from /dev/null and exits, and the session says the shell exited.
const startLine = `__nx_b=; case $BASH_VERSION in ""|[123].*|4.0*) ;; *) __nx_b=B;; esac; if [ -n "$__nx_b" ]; then ` +
	`exec 62<&0 </dev/null; exec {__nx_p}</dev/null; exec {__nx_p}<&-; __nx_c='` + bashLoop + `'; eval "${__nx_c//@/$__nx_p}"` +
	`; else exec 9<&0 </dev/null; __nx_ready ""; ` +
	`while IFS= read -r __nx_d <&9; do __nx_c=; while IFS= read -r __nx_l <&9; do [ "$__nx_l" = "$__nx_d" ] && break; __nx_c="$__nx_c$__nx_l
"; done; ` + loopBody + `command eval "$__nx_c" 9<&-; done ` + loopTail + `; fi` + "\n"

const (
	// bashLoop is bash's loop, with @ for the descriptor of the command stream. It holds no
	// single quote and no other @.
	bashLoop = `__nx_tok() { read -r -N 24 -u @ __nx_t; }; { __nx_ready B; ` +
		`while IFS= read -r -d "" -u @ __nx_c; do ` + loopBody + `eval "$__nx_c"; done ` + loopTail + `; } 62<&-`
	loopBody = `case $__nx_f in *[xv]*) __nx_trace;; esac; __nx_r=0; for __nx_i in 1; do `
	loopTail = `|| { __nx_r=$?; } 2>/dev/null; case $- in *[xv]*) { __nx_post; } 3>&2 2>/dev/null;; *) __nx_fast;; esac; done`
)

// readyLine sets the one-time token of the shell's first answer, sent in the text itself (no
// command runs before it); startLine, which must follow on the same line, answers with it.
func readyLine(token string) string {
	return `__nx_t=` + token + `; `
}

// message encodes one command for the loop: see bootstrap.
func message(bash bool, command, token string) string {
	var msg strings.Builder
	if bash {
		msg.Grow(len(command) + 2 + tokenLen)
		msg.WriteString(command)
		if !strings.HasSuffix(command, "\n") {
			msg.WriteByte('\n')
		}
		msg.WriteByte(0)
		msg.WriteString(token)
		return msg.String()
	}
	delim := newToken()
	msg.Grow(len(command) + 2*len(delim) + tokenLen + 4)
	msg.WriteString(delim)
	msg.WriteByte('\n')
	msg.WriteString(command)
	if !strings.HasSuffix(command, "\n") {
		msg.WriteByte('\n')
	}
	msg.WriteString(delim)
	msg.WriteByte('\n')
	msg.WriteString(token)
	msg.WriteByte('\n')
	return msg.String()
}

// trailer is what a command's end looks like on stdout.
type trailer struct {
	status int    // exit code, or the shell's pid for the ready line
	flags  string // "B" on the ready line when the shell is bash
	cwd    string
}

// scanner splits one stream into a command's output and its end marker. Bytes that cannot be
// part of the marker are passed on at once; a suffix that could still become the marker is held
// back until it resolves.
type scanner struct {
	start []byte // rs + "NX" + token
	// trailer mode (stdout): after the start marker, collect up to the end marker.
	wantTrailer bool
	end         []byte // rs + "NX" + token + "\n"
	held        []byte
	inTrailer   bool
	trail       []byte
	done        bool
	result      trailer
	bad         bool
}

func newScanner(token string, wantTrailer bool) *scanner {
	s := &scanner{start: []byte(rs + "NX" + token), wantTrailer: wantTrailer}
	if wantTrailer {
		s.start = []byte(rs + "NX" + token + rs)
		s.end = []byte(rs + "NX" + token + "\n")
	} else {
		s.start = []byte(rs + "NX" + token + "\n")
	}
	return s
}

// maxTrailer bounds the trailer (an exit code and a path).
const maxTrailer = 64 << 10

// feed consumes p; out receives the command's own output. After done, the rest of p is what the
// stream carried past the marker (output of background jobs), returned as rest.
func (s *scanner) feed(p []byte, out func([]byte)) (rest []byte) {
	if s.done {
		return p
	}
	if s.inTrailer {
		return s.feedTrailer(p)
	}
	buf := p
	if len(s.held) > 0 {
		buf = append(s.held, p...)
		s.held = nil
	}
	if i := bytes.Index(buf, s.start); i >= 0 {
		if i > 0 {
			out(buf[:i])
		}
		after := buf[i+len(s.start):]
		if !s.wantTrailer {
			s.done = true
			return after
		}
		s.inTrailer = true
		return s.feedTrailer(after)
	}
	// Hold back the longest suffix that is a prefix of the marker.
	keep := 0
	for k := min(len(s.start)-1, len(buf)); k > 0; k-- {
		if bytes.Equal(buf[len(buf)-k:], s.start[:k]) {
			keep = k
			break
		}
	}
	if len(buf)-keep > 0 {
		out(buf[:len(buf)-keep])
	}
	if keep > 0 {
		s.held = append([]byte(nil), buf[len(buf)-keep:]...)
	}
	return nil
}

func (s *scanner) feedTrailer(p []byte) []byte {
	s.trail = append(s.trail, p...)
	i := bytes.Index(s.trail, s.end)
	if i < 0 {
		if len(s.trail) > maxTrailer {
			s.bad, s.done = true, true
		}
		return nil
	}
	rest := s.trail[i+len(s.end):]
	body := s.trail[:i]
	s.done = true
	// body is "<status>" rs "<flags>" rs "<cwd>"
	f := bytes.SplitN(body, []byte(rs), 3)
	if len(f) != 3 {
		s.bad = true
		return rest
	}
	n, err := strconv.Atoi(string(f[0]))
	if err != nil {
		s.bad = true
		return rest
	}
	s.result = trailer{status: n, flags: string(f[1]), cwd: string(f[2])}
	return rest
}

// flush passes on what was held back (the stream ended without a marker).
func (s *scanner) flush(out func([]byte)) {
	if len(s.held) > 0 {
		out(s.held)
		s.held = nil
	}
}
