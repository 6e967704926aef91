package shell

import (
	"bytes"
	"strconv"
)

// The framing. Each command is delivered as data, never as shell source: a fixed wrapper line
// reads the command's lines with the `read` builtin up to a line holding a fresh random token,
// then evals it in the current shell (so cd, exports and functions persist) with stdin from
// /dev/null. After it, the wrapper prints a trailer on stdout (token, exit code, $PWD) and a
// marker on stderr. The parser accepts only trailers carrying the current token, so output
// that imitates a marker is just output. The wrapper keeps the user's xtrace/verbose flags off
// around itself and restores them inside the eval, so `set -x` traces only the user's command;
// the eval sits left of `||`, so `set -e` cannot kill the session. Everything is POSIX sh, so
// the same framing drives bash, dash and busybox sh, locally, over SSH and in Docker.

// rs separates trailer fields; it cannot start a forged trailer because the token follows it.
const rs = "\x1e"

// bootstrap (with the secret assigned to __nx_k before it) is sent once when the shell starts. It defines the halves of the wrapper as
// functions; startLine then moves the command stream to fd 62 (9 in shells that know only
// single-digit descriptors), makes /dev/null the shell's stdin
// (so every command reads EOF rather than hanging, with no redirection per command) and runs the
// command loop at top level: bash parses the loop once, and each command costs it only reading
// its own lines. The user's command is evaluated by the loop body, at top level, never inside a
// function, so `declare`, `return` and the positional parameters mean what they mean at a
// prompt. A one-trip inner loop absorbs a user's `break`/`continue`. Per command the engine
// sends "TOKEN\n" and the command's lines; then, to bash, a NUL, so it takes the whole message in
// one `read -d ”` (a command cannot hold a NUL); to other shells, TOKEN on a line of its own,
// which their line-by-line loop stops at.
//
// Everything is POSIX sh with bash fast paths (`read -u`), so the same framing drives bash,
// dash and busybox sh, locally, over SSH and in Docker.
const bootstrap = `command set +m 2>/dev/null; [ -n "$BASH_VERSION" ] && set +o history; unset HISTFILE; __nx_nl='
'; __nx_s='` + rs + `'; __nx_f=$-; __nx_r=0; __nx_t=; __nx_n=0; export GIT_TERMINAL_PROMPT=0 PAGER=cat GIT_PAGER=cat DEBIAN_FRONTEND=noninteractive
if [ -n "$BASH_VERSION" ]; then __nx_get() { IFS= read -r -d '' -u 62 __nx_c || return 1; __nx_n=$((__nx_n+1)); __nx_t=$__nx_k.$__nx_n; case $__nx_f in *[xv]*) __nx_trace;; esac; }
else __nx_get() { IFS= read -r __nx_t <&9 || return 1; __nx_c=; while IFS= read -r __nx_l <&9; do [ "$__nx_l" = "$__nx_t" ] && break; __nx_c="$__nx_c$__nx_l$__nx_nl"; done; case $__nx_f in *[xv]*) __nx_trace;; esac; }; fi
__nx_trace() { case $__nx_f in *x*) __nx_c="set -x$__nx_nl$__nx_c";; esac; case $__nx_f in *v*) __nx_c="set -v$__nx_nl$__nx_c";; esac; }
__nx_o="${__nx_s}NX%s${__nx_s}%s${__nx_s}%s${__nx_s}%s${__nx_s}NX%s\n"; __nx_e="${__nx_s}NX%s\n"
__nx_out() { printf "$__nx_o" "$__nx_t" "$__nx_r" "$1" "$PWD" "$__nx_t"; }
__nx_post() { __nx_f=$-; set +xv; printf "$__nx_e" "$__nx_t" >&3; __nx_out -; }
__nx_fast() { __nx_f=$-; printf "$__nx_e" "$__nx_t" >&2; printf "$__nx_o" "$__nx_t" "$__nx_r" - "$PWD" "$__nx_t"; }
`

// startLine starts the command loop. After the user's command, when tracing is on (the user ran
// `set -x`), the closing half runs with stderr to /dev/null so the trace shows only the user's
// own commands; otherwise it runs without any redirection to pay for. bash evals directly (a
// syntax error in eval never ends a bash that is not in POSIX mode); other shells use `command
// eval`, which keeps eval's errors from ending the shell. Should the loop end anyway (`break 2`,
// a closed command descriptor), the shell reads its next command from /dev/null and exits, and the session
// says the shell exited.
const startLine = `if [ -n "$BASH_VERSION" ]; then exec 62<&0 </dev/null; ` + loopHead + `eval` + loopTail + `; else exec 9<&0 </dev/null; ` + loopHead + `command eval` + loopTail + `; fi` + "\n"

const (
	loopHead = `while __nx_get; do __nx_r=0; for __nx_i in 1; do `
	loopTail = ` "$__nx_c"; done || { __nx_r=$?; } 2>/dev/null; case $- in *[xv]*) { __nx_post; } 3>&2 2>/dev/null;; *) __nx_fast;; esac; done`
)

// readyLine makes the shell report its pid and directory once the bootstrap ran, in the format
// of a trailer.
func readyLine(token string) string {
	return `__nx_t=` + token + `; __nx_r=$$; __nx_out "${BASH_VERSION:+B}"; printf '%sNX%s\n' "$__nx_s" "$__nx_t" >&2` + "\n"
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
