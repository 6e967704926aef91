// Package policy decides whether an agent's shell command may run, from the
// session's allow/deny lists of program names and the operator's policy.
//
// The policy is advisory: the real boundary is the OS account, container or
// SSH user the shell runs as. It stops an agent from running what it was told
// not to run, through every construct a shell offers for running a program,
// as far as that can be seen in the command text before it runs.
//
// # Rules
//
//   - Operator deny_patterns (RE2 regular expressions from the operator's
//     file) are matched against the whole raw command first, before any
//     parsing. They see text, not meaning: `s'h'` is not `sh` to a regex,
//     so use program lists for anything a quote could hide.
//   - With no allow or deny list (session or operator) the command is not
//     parsed at all: an empty policy costs nothing, and syntax errors are
//     left for the real shell to report.
//   - With lists, the command is parsed with mvdan.cc/sh/v3/syntax (bash
//     dialect) and every program it would run is checked. A program is
//     refused if the operator's deny list or the session's deny list names
//     it, or if an allow list (the operator's, the session's) is set and
//     does not name it. A session's allow list therefore never re-enables
//     what the operator denies or leaves out of its own allow list.
//   - Names are base names matched case-insensitively: `rm` matches
//     `/bin/rm`, `./rm`, `\rm`, `'rm'`, `"r"m`, `r”m` and `RM` (macOS file
//     systems ignore case). List entries must be base names: "/bin/rm" is
//     rejected with a hint.
//   - Every command word counts, builtins included (cd, echo, export,
//     declare, local, let, eval, trap, ...): an allow list must name the
//     builtins the agent may use. Keywords and syntax are not programs
//     (if, for, while, case, [[ ]], (( )), time, !, coproc, function
//     definitions). Wrappers count too: `sudo rm` runs sudo and rm, and
//     both must pass. Calling a shell function is a command word like any
//     other (its body was checked when it was defined), and so is `exit`.
//
// # What is seen
//
// Simple commands anywhere in pipelines and lists (|, |&, &&, ||, ;, &,
// newlines), subshells, groups, if/while/until/for/select/case bodies and
// conditions, function bodies (checked when the function is defined, since
// it may run later under any name), command substitution $(...) and
// backticks (also inside double quotes, assignments `X=$(rm a)`, array
// elements and indexes, redirection targets, unquoted here-documents,
// parameter expansions `${x:-$(rm a)}`, arithmetic and [[ ]]), process
// substitution <(...) >(...), coproc, time and !.
//
// Strings a program runs as shell code are parsed recursively (up to
// MaxDepth levels): sh/bash/dash/zsh/ksh/mksh/ash/yash -c STRING (options
// such as -euo pipefail, -lc, --norc understood), eval with literal
// arguments (joined with spaces), trap ACTION, alias NAME=VALUE (an alias
// becomes command text), PROMPT_COMMAND=..., the command substitutions of
// PS0..PS4 (PS4 is expanded by set -x), mapfile -C, su/runuser -c,
// flock -c, watch without -x (its words run through sh -c), env -S.
// A shell reading commands from standard input (`bash`, `sh -s`, `bash -`,
// `bash /dev/stdin`, `sudo -s`, `su`, `chroot DIR`) is parsed when its input
// is a literal here-document or here-string and is dynamic otherwise (so
// `curl ... | sh` is refused).
//
// Wrappers, programs that run another program or a command string given on
// their command line, are followed to what they run, with their options
// parsed as their getopt would (argument-taking options skipped; long
// options by unambiguous prefix, as getopt_long does; options anywhere for
// the programs whose getopt permutes them). The table in wrappertable.go
// comes from a survey of Debian's coreutils, util-linux, procps, findutils,
// debianutils, sudo, strace, gdb, fakeroot, bsdutils, libcap2-bin, passwd
// and login and of common others, and says for each program how it takes
// its command: after its options and a fixed number of operands (nice,
// timeout DURATION, chrt PRIORITY, taskset MASK, chroot NEWROOT, setarch
// ARCH, unshare, nsenter, prlimit, setpriv, strace, fakeroot, systemd-run
// ...), as a string run by a shell (script -c, sg, su -c, flock -c, split
// --filter, tar --to-command, ssh -o ProxyCommand=, rsync -e, man -P, zip
// -TT, strace -o '|cmd'), as a program named by an option (sort
// --compress-program, install --strip-program, scp -S, tar
// --rsh-command), through another shell (capsh --, bash -c), or from
// standard input (a shell run by unshare, setarch, script, fakeroot or sg
// without a program reads a literal here-document, else it is dynamic).
// The wrappers handled on their own: env (-i, -u NAME, -C DIR, -S STRING,
// NAME=VALUE), sudo (-u USER, -g, -D, -E, --user=, NAME=VALUE, -s/-i
// without a command), doas, su/runuser, xargs (-0 -n N -I R -P N ...,
// `echo` when no program), find -exec/-execdir/-ok/-okdir ... ; or +,
// flock, watch, busybox/toybox APPLET, command (but `command -v/-V` only
// looks up), builtin, exec (-a NAME -c -l), hash -p PATH NAME (makes NAME
// run PATH).
//
// A word from data where a wrapper's option or program could stand makes
// the command dynamic: `timeout "$t" KILL 5 rm` runs rm when t is -s, and
// `sort "$f"` runs a program when f is --compress-program=PROG. After a
// literal "--" no word is an option, so `sort -- "$f"` passes.
//
// Some programs run others in ways this package cannot follow: an
// interpreter of their own (gdb -ex 'shell CMD', lldb, perf), commands read
// from standard input or files (parallel, at, crontab, run-parts, sftp,
// ftp, lftp), options that add commands (systemd-run -p ExecStartPre=,
// valgrind --db-command, fakeroot -l) or an editor named by the
// environment (sudoedit, vipw). With lists set they are refused as
// dynamic, unless asked only to report (--version).
//
// A deny list can never be complete: any program missing from the table is
// checked by its own name only, whatever it runs. An allow list is the safe
// mode: a program the policy does not understand does not run unless the
// list names it.
//
// # Evaluated data (refused whenever a list is set)
//
// Bash evaluates some words a second time: as an arithmetic expression, or
// as the name of a variable. In that second pass the value of a variable
// operand is evaluated in turn, and a subscript found in it is expanded,
// command substitutions included: after x='a[$(rm v)]' (an assignment that
// runs nothing), `echo $((x))` runs rm. With a list set, each place where
// bash does this must show in the text everything it will evaluate, or the
// command is refused with the rule "arithmetic on data":
//
//   - Arithmetic: $((...)), $[...], ((...)), for ((...)), let, the operands
//     of [[ ... -eq/-ne/-lt/-le/-gt/-ge ... ]], subscripts (a[i]=, a=([i]=v),
//     ${a[i]}, ${#a[i]}, unset a[i], read a[i] ...) and ${x:offset:length}
//     may use integer literals (decimal, 0x, octal, base#digits), operators,
//     and the parameters the shell itself sets to a number ($#, $?, $$, $!,
//     ${#name}). A variable operand (x, $x, a[1]) is refused however it was
//     set: its value may hold a subscript. ${a[@]} and ${a[*]} are not
//     arithmetic. A subscript of an associative array is a key, not
//     arithmetic, but the policy cannot tell a name's type (declare -A can
//     fail on an indexed array), so keys must be integer literals too,
//     except inside declare -A NAME=(...) itself. test and [ compare
//     integers without evaluating them (-eq takes numbers only), so their
//     -eq ... are not refused.
//   - Attributes that make later uses evaluate: declare/typeset/local -i
//     (every later assignment to the name is arithmetic) and -n (a name
//     reference evaluates its target, subscript included, on every use, and
//     a for loop or an assignment can retarget it) are refused; so is an
//     assignment of anything but an integer literal to the variables bash
//     gives the integer attribute (RANDOM, SECONDS, OPTIND ...), including
//     through read, printf -v, getopts and for.
//   - Names given as data: read, printf -v, mapfile/readarray, getopts,
//     wait -p, compgen -V, unset, declare/typeset/local/export/readonly,
//     test -v / [ -v and [[ -v ]] take names that must be literals, with a
//     literal subscript if any; ${!name} (indirect expansion) is refused,
//     ${!a[@]} and ${!prefix*} are not. For test and [, an operator can come
//     from data too: an unquoted expansion (which could split into -v and a
//     name) is refused, and so is a quoted expansion that could be -v
//     followed by a name that is not a literal.
//   - Values declare evaluates: declare, typeset and local (export and
//     readonly with -a/-A) evaluate a value of the form (...) as an array
//     assignment when the name is an array, so a value that is not a literal
//     is refused (`local x; x=$1` assigns it as a string) and a literal one
//     is inspected as the array assignment it becomes.
//   - Code in variables: PS0-PS4, PROMPT_COMMAND, BASH_ENV and ENV (a
//     starting bash or sh expands the last two, substitutions included) set
//     to a literal are inspected, including through env and sudo NAME=VALUE
//     and ${NAME:=value}; set to data (a variable, read, printf -v) they are
//     dynamic. compgen/complete -C strings and -W word lists are inspected.
//
// # The session's own state (refused whenever a list is set)
//
// The session's command loop (internal/shell) keeps its variables and
// functions in the names starting with ReservedPrefix (__nx_) and calls a
// few builtins (read, printf, eval, set, command, builtin ...). With a list
// set, the rule "reserved name" refuses a command that names one of those
// variables or functions anywhere (assigning, reading, declaring, unsetting,
// calling, defining), defines a function named like one of those builtins
// or disables it with enable -n, names a descriptor from MinShellFD (10) up
// or one given by data (11<&-, <&11, >&$fd, {fd}<&-, read -u 11: the shell
// keeps its own there, the command stream among them, and a command could
// close it and open its own in its place), or redirects to a path naming a
// process's file descriptors (/dev/fd/N but 0-2, /proc/PID/fd/N), through
// which the command stream could be reached.
//
// # Dynamic commands (refused whenever a list is set)
//
// Anything whose program cannot be known from the text is refused with the
// rule "dynamic command", fail-closed, for allow and deny lists alike: a
// command name that is not a literal (`$CMD x`, `${x}`, `"$(echo rm)"`,
// `$'\x72m'`, globs `/bin/r?`, brace expansion `{rm,x}`); eval or sh -c of
// anything but a literal (so `eval "$(ssh-agent -s)"` and
// `bash -c "cd $DIR"` are refused: a variable's value becomes code); a
// shell fed by a pipe; `bash <(curl ...)`, `source <(...)`, scripts from
// /dev/fd; `{}` or an xargs -I string in a program name or in a shell
// string (data becomes code); a wrapper whose program comes from xargs
// input (`xargs sh -c`, `xargs env`); a wrapper option this package does
// not know (`sudo --frobnicate rm`); `${x@P}`; `sudo -e` (runs $EDITOR);
// `enable -f`; fish/csh/pwsh command strings or standard input (another
// language); exported functions through env (BASH_FUNC_name%%=...).
//
// A command that does not parse is refused with "unparsable command" when
// a list is set (it cannot be inspected; the refusal carries the parser's
// message). A command larger than MaxInspectBytes, nested deeper than
// MaxNesting brackets, or whose shell strings nest deeper than MaxDepth, is
// refused with "uninspectable command": these limits bound the parser's
// time and stack on hostile input.
//
// # What it cannot see (documented limits)
//
//   - Files. A script file run by `bash script.sh`, `source f`, `./x`,
//     `make`, `npm run`, a Makefile or a git hook is not read; neither is a
//     program the agent writes and then runs under an allowed name, or a
//     PATH changed to put its own `ls` first. Deny lists name programs, not
//     binaries.
//   - Interpreters and programs that run other programs in their own
//     language, configuration or environment: python -c, perl -e, node -e,
//     ruby -e, awk's system(), sed's e command, vim -c, less, git -c
//     core.pager=..., make, fd -x, entr, ~/.ssh/config and ~/.gdbinit,
//     PAGER, EDITOR, GIT_SSH_COMMAND, the $SHELL that script -c and flock -c
//     use, programs a tool picks itself (tar -J runs xz), ssh HOST CMD (runs
//     remotely), and every program not in the wrapper table. Deny these
//     programs, or use an allow list, to cover them.
//   - Files named by variables: BASH_ENV/ENV naming a script file, a path
//     built at run time that reaches /proc/PID/fd, a link made earlier to
//     it, or such a path given to a program as an argument (tee, cp ...).
//   - Effects that are not programs: `find -delete`, `> file`, `:> file`.
//   - Deny patterns see only the raw text.
//
// A persistent session adds one more: state set by earlier commands (aliases
// with `shopt -s expand_aliases`, functions, traps, hash entries) is checked
// when it is set, not when it is used, so it must be set through a checked
// command; nothing set before the policy applied exists in a new session.
//
// # Files and programs (Inspect)
//
// Inspect walks a command the same way and reports, for the ai-chat
// permission layer (internal/agent/permission), the programs by the name the
// command gives them (./bin/echo, not echo), the files its redirections open
// (>, >>, &>, &>>, >|, <>, >&FILE, <, and so $(<FILE); not here-documents,
// here-strings, descriptor copies or a process substitution as the target),
// each with its path when the text fixes it (no variable, substitution, glob,
// brace or tilde expansion) or else the start the text fixes, the argument
// words of its simple commands, and whether it changes directory. It decides
// nothing.
//
// # Read-only commands
//
// ReadOnly, a separate question answered with the same parser, tells the
// agent-shell manager whether a command is provably read-only, so that it
// can skip the automatic checkpoint before it. It never allows or refuses a
// command.
package policy
