package policy

import (
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// The wrappers: programs that run another program, or a command string,
// given on their command line. The table comes from a survey of Debian's
// coreutils, util-linux, procps, findutils, debianutils, sudo, strace, gdb,
// fakeroot, bsdutils, libcap2-bin, passwd and login, and of common others,
// reading each program's --help and manual for the ways it takes a command.
// A program found here is followed to what it runs, with its options parsed
// as its getopt would; an option it does not know, a word from data where an
// option or the program could stand, or a way of running commands the
// parser cannot follow, makes the command dynamic (fail closed). A program
// missing from the table is checked by its own name only: a deny list can
// never enumerate every program that runs another, which is why an allow
// list is the safe mode (see doc.go).

// bareRun is what a wrapper does when it is given no program.
type bareRun int

const (
	bareNothing bareRun = iota // it reports something, or fails: nothing runs
	bareShell                  // it runs a shell, which reads commands from standard input
)

// wrapperSpec describes a wrapper whose command line is options, a fixed
// number of operands, then the program and its arguments.
type wrapperSpec struct {
	how  string   // how it takes its command, in words (for the documentation)
	spec flagSpec // its options
	lead int      // operands before the options (setarch ARCH [options] ...)
	// progAt is the index among the operands after the options of the
	// program to run (timeout DURATION PROGRAM: 1), or -1 when no operand
	// is a program (script FILE).
	progAt int
	stop   []string          // options with which it runs no program (-p PID, --list)
	shell  []string          // options whose value is a command string, run by a shell
	prog   []string          // options whose value names a program
	pipe   []string          // options whose value, after a leading | or !, is a command (strace -o)
	dyn    map[string]string // options that make what runs unknowable, and why
	bare   bareRun
	// permute: its getopt takes options anywhere before "--" (it runs no
	// program operand, so nothing stops the options).
	permute bool
}

// run analyzes one invocation.
func (ws *wrapperSpec) run(fr *frame, prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	lead := ws.lead
	if lead > len(args) {
		return // a usage error: nothing runs
	}
	for _, a := range args[:lead] {
		s, ok := literal(a)
		switch {
		case ok && len(s) > 1 && s[0] == '-':
			lead = 0 // setarch --list, -h: options where the operand goes
		case !ok || s == "-":
			fr.w.dynamic(fr.text(a), prog+"'s operand comes from data, so the program it runs cannot be told")
			return
		}
	}
	var rest []*syntax.Word
	var found []flagVal
	var dashdash, ok bool
	if ws.permute {
		rest, found, ok = fr.permuted(prog, args[lead:], ws.spec, false)
		dashdash = true
	} else {
		rest, found, dashdash, ok = fr.flagsEnd(prog, args[lead:], ws.spec)
	}
	if !ok {
		return
	}
	for _, f := range found {
		if why, bad := ws.dyn[f.name]; bad {
			fr.w.dynamic(prog+" "+optText(f.name), why)
			return
		}
	}
	ranString := false
	for _, f := range found {
		switch {
		case slices.Contains(ws.stop, f.name):
			return
		case slices.Contains(ws.shell, f.name):
			fr.shellString(prog+" "+optText(f.name), f.word, f.value, f.litVal, ctx)
			ranString = true
		case slices.Contains(ws.prog, f.name):
			fr.optionProgram(prog, f)
		case slices.Contains(ws.pipe, f.name):
			switch {
			case !f.litVal:
				fr.w.dynamic(prog+" "+optText(f.name), prog+" "+optText(f.name)+" is not a literal, and a value starting with | or ! is a command")
			case strings.HasPrefix(f.value, "|") || strings.HasPrefix(f.value, "!"):
				fr.shellString(prog+" "+optText(f.name), nil, f.value[1:], true, ctx)
			}
		}
		if fr.w.stop {
			return
		}
	}
	if ws.progAt < 0 || len(rest) <= ws.progAt {
		switch {
		case ranString:
		case ctx.appended:
			fr.noProgram(prog, ctx)
		case ws.bare == bareShell:
			fr.stdinScript(prog, redirs, ctx)
		}
		return
	}
	// An operand before the program that comes from data could expand to
	// an option and shift what is taken as the program, unless the
	// options ended with "--".
	if !dashdash {
		for _, a := range rest[:ws.progAt] {
			if _, ok := literal(a); !ok {
				fr.w.dynamic(fr.text(a), prog+"'s operand comes from data and could be an option; write -- before it")
				return
			}
		}
	}
	fr.call(rest[ws.progAt:], redirs, ctx)
}

// optionProgram reports the program an option names.
func (fr *frame) optionProgram(prog string, f flagVal) {
	if !f.litVal {
		fr.w.dynamic(prog+" "+optText(f.name), prog+" "+optText(f.name)+" names a program that is not a literal")
		return
	}
	// The value may carry arguments (tar -I 'zstd -19'): its first word
	// is the program.
	if fields := strings.Fields(f.value); len(fields) > 0 {
		fr.w.program(fields[0])
	}
}

func optText(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// setarchFlags are the options of setarch and of its per-architecture
// names (linux64 ...).
var setarchFlags = flagSpec{flags: "v3BFILRSTXZhV", long: []string{"32bit", "fdpic-funcptrs", "short-inode",
	"addr-compat-layout", "addr-no-randomize", "whole-seconds", "sticky-timeouts", "read-implies-exec",
	"mmap-page-zero", "3gb", "4gb", "uname-2.6", "verbose", "list", "help", "version"}}

// specWrappers are the wrappers described by a wrapperSpec.
var specWrappers = map[string]*wrapperSpec{
	// coreutils
	"nice": {how: "options (-n N, -N), then the program", progAt: 0,
		spec: flagSpec{arg: "n", long: []string{"adjustment=", "help", "version"}, numeric: true}},
	"timeout": {how: "options, DURATION, then the program", progAt: 1,
		spec: flagSpec{arg: "sk", flags: "v", long: []string{"signal=", "kill-after=", "preserve-status", "foreground", "verbose", "help", "version"}}},
	"nohup": {how: "the program", progAt: 0, spec: flagSpec{long: []string{"help", "version"}}},
	"stdbuf": {how: "options (-i/-o/-e MODE), then the program", progAt: 0,
		spec: flagSpec{arg: "ioe", long: []string{"input=", "output=", "error=", "help", "version"}}},
	"chroot": {how: "options, NEWROOT, then the program; without one, a shell reading standard input", progAt: 1, bare: bareShell,
		stop: []string{"help", "version"},
		spec: flagSpec{long: []string{"userspec=", "groups=", "skip-chdir", "help", "version"}}},
	"exec": {how: "options (-a NAME, -c, -l), then the program; without one, only its redirections", progAt: 0,
		spec: flagSpec{arg: "a", flags: "cl"}},
	// time (the program, not the keyword)
	"time": {how: "options (-f FORMAT, -o FILE), then the program", progAt: 0,
		spec: flagSpec{arg: "fo", flags: "apqvV", long: []string{"format=", "output=", "append", "portability", "verbose", "quiet", "help", "version"}}},
	// util-linux
	"setsid": {how: "options (-c, -f, -w), then the program", progAt: 0,
		spec: flagSpec{flags: "cfwhV", long: []string{"ctty", "fork", "wait", "help", "version"}}},
	"ionice": {how: "options (-c CLASS, -n LEVEL, -t), then the program; -p/-P/-u act on running processes", progAt: 0,
		stop: []string{"p", "P", "u", "pid", "pgid", "uid"},
		spec: flagSpec{flags: "tpPuhV", arg: "cn", long: []string{"class=", "classdata=", "ignore", "pid", "pgid", "uid", "help", "version"}}},
	"taskset": {how: "options, MASK, then the program; -p acts on a running process", progAt: 1,
		stop: []string{"p", "pid"},
		spec: flagSpec{flags: "acpVh", long: []string{"all-tasks", "cpu-list", "pid", "help", "version"}}},
	"chrt": {how: "options, PRIORITY, then the program; -p acts on a running process, -m lists limits", progAt: 1,
		stop: []string{"p", "pid", "m", "max", "h", "help", "V", "version"},
		spec: flagSpec{flags: "abdfimoprRvhV", arg: "DPT", long: []string{"all-tasks", "batch", "deadline", "fifo", "idle",
			"max", "other", "pid", "rr", "reset-on-fork", "sched-runtime=", "sched-period=", "sched-deadline=", "verbose", "help", "version"}}},
	"choom": {how: "options (-n N), then the program; -p acts on a running process", progAt: 0,
		stop: []string{"p", "pid"},
		spec: flagSpec{arg: "np", flags: "hV", long: []string{"adjust=", "pid=", "help", "version"}}},
	"prlimit": {how: "options (--RESOURCE[=LIMITS] with the value attached), then the program; -p acts on a running process", progAt: 0,
		stop: []string{"p", "pid"},
		spec: flagSpec{arg: "op", optional: "cdefilmnqrstuvxy", flags: "hV", long: []string{"pid=", "output=", "noheadings", "raw",
			"verbose", "help", "version", "core?", "data?", "nice?", "fsize?", "sigpending?", "memlock?", "rss?", "nofile?",
			"msgqueue?", "rtprio?", "stack?", "cpu?", "nproc?", "as?", "locks?", "rttime?"}}},
	"setpriv": {how: "options (--reuid=UID ...), then the program; -d only reports", progAt: 0,
		stop: []string{"d", "dump", "h", "help", "V", "version"},
		spec: flagSpec{flags: "dhV", long: []string{"dump", "nnp", "no-new-privs", "ambient-caps=", "inh-caps=", "bounding-set=",
			"ruid=", "euid=", "rgid=", "egid=", "reuid=", "regid=", "clear-groups", "keep-groups", "init-groups", "groups=",
			"securebits=", "pdeathsig=", "selinux-label=", "apparmor-profile=", "landlock-access=", "landlock-rule=",
			"seccomp-filter=", "reset-env", "help", "version"}}},
	"setarch": {how: "ARCH, options, then the program; without one, /bin/sh reading standard input", lead: 1, progAt: 0, bare: bareShell,
		stop: []string{"list", "h", "help", "V", "version"}, spec: setarchFlags},
	"unshare": {how: "options (namespace options take their file attached: -m[FILE]), then the program; without one, $SHELL reading standard input", progAt: 0, bare: bareShell,
		stop: []string{"h", "help", "V", "version"},
		spec: flagSpec{flags: "fhVrc", optional: "muinpUCT", arg: "RwSG", long: []string{"mount?", "uts?", "ipc?", "net?", "pid?",
			"user?", "cgroup?", "time?", "fork", "map-user=", "map-group=", "map-root-user", "map-current-user", "map-auto",
			"map-users=", "map-groups=", "kill-child?", "mount-proc?", "propagation=", "setgroups=", "keep-caps", "root=",
			"wd=", "setuid=", "setgid=", "monotonic=", "boottime=", "load-interp=", "help", "version"}}},
	"nsenter": {how: "options (namespace options take their file attached: -m[FILE]), then the program; without one, $SHELL reading standard input", progAt: 0, bare: bareShell,
		stop: []string{"h", "help", "V", "version"},
		spec: flagSpec{flags: "aFZhV", arg: "tSGW", optional: "muinpCUTrw", long: []string{"all", "target=", "mount?", "uts?",
			"ipc?", "net?", "pid?", "cgroup?", "user?", "time?", "setuid=", "setgid=", "preserve-credentials", "root?", "wd?",
			"wdns=", "no-fork", "follow-context", "user-parent", "keep-caps", "join-cgroup", "env", "help", "version"}}},
	"uclampset": {how: "options (-m MIN, -M MAX), then the program; -p and -s act on processes or the system", progAt: 0,
		stop: []string{"p", "pid", "s", "system"},
		spec: flagSpec{flags: "asRvhV", arg: "mMp", long: []string{"all-tasks", "pid=", "system", "reset-on-fork", "verbose", "max", "help", "version"}}},
	"switch_root": {how: "NEWROOT, then the program (init)", progAt: 1, spec: flagSpec{flags: "hV", long: []string{"help", "version"}}},
	"script": {how: "-c COMMAND, run by $SHELL; without -c, $SHELL reading standard input; the operand is the log file; options anywhere", progAt: -1, bare: bareShell, permute: true,
		shell: []string{"c", "command"},
		spec: flagSpec{flags: "aefqhV", arg: "IOBTmcEo", optional: "t", long: []string{"log-in=", "log-out=", "log-io=", "log-timing=",
			"timing?", "logging-format=", "append", "command=", "return", "flush", "force", "echo=", "output-limit=", "quiet", "help", "version"}}},
	// strace
	"strace": {how: "options, then the program; -o '|COMMAND' (or '!') pipes the trace to a shell command; -p attaches to running processes", progAt: 0,
		pipe: []string{"o", "output"},
		spec: flagSpec{flags: "fhiknqrtvxyzZYcCwdADTV", arg: "eEpubIPaosXOSU", long: []string{"env=", "attach=", "user=", "detach-on=",
			"daemonize?", "follow-forks", "output-separately", "interruptible=", "trace=", "signal=", "status=", "trace-path=",
			"successful-only", "failed-only", "columns=", "abbrev=", "verbose=", "raw=", "read=", "write=", "quiet?", "kvm=",
			"decode-fds?", "instruction-pointer", "stack-traces", "syscall-number", "output=", "output-append-mode",
			"relative-timestamps?", "string-limit=", "absolute-timestamps?", "timestamps?", "syscall-times?", "no-abbrev",
			"strings-in-hex?", "const-print-style=", "decode-pids=", "summary-only", "summary", "summary-syscall-overhead=",
			"summary-sort-by=", "summary-columns=", "summary-wall-clock", "inject=", "fault=", "debug", "help",
			"seccomp-bpf", "tips?", "version"}}},
	"ltrace": {how: "options, then the program; -p attaches to a running process", progAt: 0,
		spec: flagSpec{flags: "bcCfhiLrStTV", arg: "aADeFlnopsuwx", long: []string{"align=", "demangle", "library=", "output=",
			"where=", "indent=", "help", "version"}}},
	// fakeroot
	"fakeroot": {how: "options, then the program; without one, $SHELL reading standard input; -l loads a library into every program, -f runs another faked", progAt: 0, bare: bareShell,
		prog: []string{"f", "faked"},
		dyn:  map[string]string{"l": "fakeroot -l loads a library into every program it runs", "lib": "fakeroot --lib loads a library into every program it runs"},
		spec: flagSpec{flags: "uhv", arg: "lfisb", long: []string{"lib=", "faked=", "unknown-is-real", "fd-base=", "help", "version"}}},
	// polkit, systemd
	"pkexec": {how: "options (--user USER), then the program; without one, the user's shell", progAt: 0, bare: bareShell,
		spec: flagSpec{long: []string{"user=", "disable-internal-agent", "keep-cwd", "help", "version"}}},
	"systemd-run": {how: "options, then the program; -p/--*-property can add commands to the unit, -S runs $SHELL, -H/-M run elsewhere", progAt: 0,
		dyn: map[string]string{
			"p": "systemd-run -p sets unit properties, which can run commands (ExecStartPre= ...)", "property": "systemd-run --property can run commands (ExecStartPre= ...)",
			"path-property": "systemd-run --path-property can run commands", "socket-property": "systemd-run --socket-property can run commands",
			"timer-property": "systemd-run --timer-property can run commands", "S": "systemd-run -S runs $SHELL interactively",
			"shell": "systemd-run --shell runs $SHELL interactively",
		},
		spec: flagSpec{flags: "hrdtPqGS", arg: "HMupE", long: []string{"help", "version", "no-ask-password", "user", "host=", "machine=",
			"scope", "unit=", "property=", "description=", "slice=", "slice-inherit", "no-block", "remain-after-exit", "wait",
			"send-sighup", "service-type=", "uid=", "gid=", "nice=", "working-directory=", "same-dir", "setenv=", "pty", "pipe",
			"quiet", "collect", "shell", "path-property=", "socket-property=", "on-active=", "on-boot=", "on-startup=",
			"on-unit-active=", "on-unit-inactive=", "on-calendar=", "on-timezone-change", "on-clock-change", "timer-property=", "expand-environment="}}},
	// common others
	"chronic":          {how: "options (-e, -v), then the program (moreutils)", progAt: 0, spec: flagSpec{flags: "ev"}},
	"ifne":             {how: "-n, then the program (moreutils)", progAt: 0, spec: flagSpec{flags: "n"}},
	"lckdo":            {how: "options, LOCKFILE, then the program (moreutils)", progAt: 1, spec: flagSpec{flags: "qwWs", arg: "E"}},
	"eatmydata":        {how: "the program", progAt: 0, spec: flagSpec{long: []string{"help", "version"}}},
	"nocache":          {how: "options (-n N), then the program", progAt: 0, spec: flagSpec{arg: "n"}},
	"torsocks":         {how: "options, then the program", progAt: 0, spec: flagSpec{flags: "6dqhi", arg: "uaP", long: []string{"user=", "pass=", "address=", "port=", "isolate", "shell", "version", "help"}}, dyn: map[string]string{"shell": "torsocks --shell runs $SHELL"}},
	"proxychains":      {how: "options (-q, -f FILE), then the program", progAt: 0, spec: flagSpec{flags: "q", arg: "f"}},
	"proxychains4":     {how: "options (-q, -f FILE), then the program", progAt: 0, spec: flagSpec{flags: "q", arg: "f"}},
	"unbuffer":         {how: "-p, then the program (expect)", progAt: 0, spec: flagSpec{flags: "p"}},
	"catchsegv":        {how: "the program", progAt: 0},
	"dbus-run-session": {how: "options, then the program", progAt: 0, spec: flagSpec{long: []string{"config-file=", "dbus-daemon=", "help", "version"}}, prog: []string{"dbus-daemon"}},
	"xvfb-run": {how: "options, then the program", progAt: 0,
		spec: flagSpec{flags: "ahl", arg: "eEfnps", long: []string{"auto-servernum", "error-file=", "auth-file=", "help", "listen-tcp",
			"server-num=", "xauth-protocol=", "server-args=", "wait="}}},
	"numactl": {how: "options, then the program; --show/--hardware only report", progAt: 0,
		stop: []string{"s", "show", "H", "hardware"},
		spec: flagSpec{flags: "alsHV", arg: "iNmpCPb", long: []string{"all", "interleave=", "preferred=", "physcpubind=", "cpunodebind=",
			"membind=", "localalloc", "show", "hardware", "length=", "offset=", "shmmode=", "shm=", "file=", "huge", "touch",
			"strict", "dump", "dump-nodes", "version", "balancing", "preferred-many="}}},
	"cgexec": {how: "options (-g CONTROLLERS:PATH), then the program", progAt: 0, spec: flagSpec{arg: "g", long: []string{"sticky"}}},
	"faketime": {how: "options, TIMESTAMP, then the program", progAt: 1, spec: flagSpec{flags: "f", arg: "m", long: []string{"exclude-monotonic", "help", "version", "date-prog="}},
		prog: []string{"date-prog"}},
	"valgrind": {how: "options (--NAME=VALUE), then the program; --db-command runs a debugger command", progAt: 0,
		dyn:  map[string]string{"db-command": "valgrind --db-command runs a command through a shell"},
		spec: flagSpec{flags: "hvqd", long: valgrindLong}},
}

// valgrindLong are valgrind's core options; a tool option it does not list
// makes the command dynamic.
var valgrindLong = []string{"help", "help-debug", "help-dyn-options", "version", "quiet", "verbose", "tool=", "trace-children=",
	"trace-children-skip=", "trace-children-skip-by-arg=", "child-silent-after-fork=", "vgdb=", "vgdb-error=", "vgdb-stop-at=",
	"track-fds=", "time-stamp=", "log-fd=", "log-file=", "log-socket=", "xml=", "xml-fd=", "xml-file=", "xml-socket=",
	"xml-user-comment=", "demangle=", "num-callers=", "error-limit=", "exit-on-first-error=", "error-exitcode=",
	"error-markers=", "show-error-list=", "show-below-main=", "fullpath-after=", "extra-debuginfo-path=",
	"debuginfo-server=", "allow-mismatched-debuginfo=", "suppressions=", "gen-suppressions=", "input-fd=", "db-attach=",
	"db-command=", "max-stackframe=", "main-stacksize=", "max-threads=", "leak-check=", "leak-resolution=",
	"show-leak-kinds=", "errors-for-leak-kinds=", "show-reachable=", "show-possibly-lost=", "track-origins=",
	"undef-value-errors=", "keep-stacktraces=", "freelist-vol=", "malloc-fill=", "free-fill=", "smc-check=",
	"read-inline-info=", "read-var-info=", "sigill-diagnostics=", "unw-stack-scan-thresh=", "unw-stack-scan-frames=",
	"resync-filter=", "num-transtab-sectors=", "avg-transtab-entry-size=", "aspace-minaddr=", "valgrind-stacksize=",
	"show-emwarns=", "require-text-symbol=", "soname-synonyms=", "fair-sched=", "sim-hints=", "kernel-variant=",
	"merge-recursive-frames=", "num-recursive-frames=", "expensive-definedness-checks=", "redzone-size=",
	"dsymutil=", "vex-iropt-level=", "stats=", "progress-interval="}

// archNames are setarch's names per architecture (linux64 = setarch x86_64 ...).
var archNames = []string{"linux32", "linux64", "i386", "i486", "i586", "i686", "x86_64", "uname26", "aarch64", "arm64",
	"armv7l", "armv8l", "arm", "ppc", "ppc32", "ppc64", "ppc64le", "ppcle", "s390", "s390x", "sparc", "sparc32",
	"sparc32bash", "sparc64", "mips", "mips32", "mips64", "parisc", "parisc32", "parisc64", "ia64", "alpha", "riscv64",
	"loongarch64", "m68k"}

// dynamicWrappers run programs in ways the policy cannot follow: an
// interpreter of their own (gdb), programs read from a file or standard
// input, or an editor named by the environment. With lists set they are
// refused (dynamic) unless invoked only to report (one of the words listed
// as safe among its arguments).
var dynamicWrappers = map[string]struct {
	how  string
	safe []string
}{
	"gdb":               {how: "its own command language runs programs (-ex 'shell CMD', !CMD, run, call system(), python)", safe: []string{"--version", "-v", "--help", "-h", "--configuration"}},
	"gdbtui":            {how: "gdb -tui", safe: []string{"--version", "--help"}},
	"gdb-multiarch":     {how: "gdb", safe: []string{"--version", "--help"}},
	"cgdb":              {how: "runs gdb", safe: []string{"--version", "--help"}},
	"lldb":              {how: "its own command language runs programs (platform shell, script)", safe: []string{"--version", "--help"}},
	"perf":              {how: "perf record/stat/trace/top run a program; perf script runs scripts", safe: []string{"--version", "--help", "list", "version"}},
	"parallel":          {how: "runs each input line or argument as a command through $SHELL, with {} replaced by data", safe: []string{"--version", "--help"}},
	"sem":               {how: "parallel --semaphore", safe: []string{"--version", "--help"}},
	"env_parallel":      {how: "parallel", safe: []string{"--version", "--help"}},
	"run-parts":         {how: "runs every executable in a directory", safe: []string{"--test", "--list", "--help", "--version"}},
	"scriptlive":        {how: "replays a typescript's input into $SHELL", safe: []string{"--help", "--version"}},
	"sulogin":           {how: "runs $SUSHELL or root's shell", safe: []string{"--help", "--version"}},
	"login":             {how: "runs the user's login shell", safe: []string{"--help"}},
	"sudoedit":          {how: "runs $SUDO_EDITOR, $VISUAL or $EDITOR", safe: []string{"--help", "--version"}},
	"vipw":              {how: "runs $VISUAL or $EDITOR", safe: []string{"--help"}},
	"vigr":              {how: "runs $VISUAL or $EDITOR", safe: []string{"--help"}},
	"vipe":              {how: "runs $EDITOR on a pipe (moreutils)", safe: []string{"--help"}},
	"firejail":          {how: "options, then a program, or a profile's shell; profiles run commands", safe: []string{"--version", "--help", "--list"}},
	"bwrap":             {how: "options (some read further options from descriptors), then the program", safe: []string{"--version", "--help"}},
	"hyperfine":         {how: "runs its arguments as shell commands, with parameters substituted", safe: []string{"--version", "--help"}},
	"watchexec":         {how: "runs its arguments through a shell on file changes", safe: []string{"--version", "--help"}},
	"pee":               {how: "runs each argument as a shell command (moreutils)", safe: []string{"--help"}},
	"mispipe":           {how: "runs two shell commands (moreutils)", safe: []string{"--help"}},
	"systemd-nspawn":    {how: "runs a program in a container tree, with many options", safe: []string{"--version", "--help"}},
	"sftp":              {how: "its commands (batch file with -b, or standard input) run local shell commands with !", safe: []string{"--help"}},
	"ftp":               {how: "its commands (standard input) run local shell commands with !", safe: []string{"--help"}},
	"lftp":              {how: "-c/-e/-f commands and standard input run local shell commands with !", safe: []string{"--version", "--help"}},
	"crontab":           {how: "installs commands read from a file or standard input; -e runs $EDITOR", safe: []string{"-l", "-r", "-V", "--help"}},
	"at":                {how: "runs commands read from standard input or a file later, through sh", safe: []string{"-l", "-V", "-r", "-d", "--help"}},
	"batch":             {how: "at", safe: []string{"--help"}},
	"expect":            {how: "a Tcl interpreter that spawns programs", safe: []string{"-v", "--help"}},
	"startpar":          {how: "runs scripts in parallel", safe: []string{"--help"}},
	"start-stop-daemon": {how: "runs the program given by --exec/--startas, with many options", safe: []string{"--help", "--version", "-T", "--status"}},
}

// permutedSpec describes a program whose operands are files, not a
// program, but whose options can name programs or command strings. Its
// options may come anywhere before "--" (GNU getopt permutes them), so any
// word that could be an option is read as one, and a word from data in
// that place makes the command dynamic: it could be the option that names
// the program.
type permutedSpec struct {
	how   string
	spec  flagSpec
	shell []string // options whose value is a command string, run by a shell
	prog  []string // options whose value names a program
	// tar: a first word without "-" is a bundle of short options whose
	// values are the following words, in order ("tar czf out.tgz dir").
	oldStyle bool
	// tar --checkpoint-action=exec=COMMAND: a shell command after exec=.
	checkpoint bool
}

func (ps *permutedSpec) run(fr *frame, prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	_, found, ok := fr.permuted(prog, args, ps.spec, ps.oldStyle)
	if !ok {
		return
	}
	for _, f := range found {
		switch {
		case slices.Contains(ps.shell, f.name):
			fr.shellString(prog+" "+optText(f.name), f.word, f.value, f.litVal, ctx)
		case slices.Contains(ps.prog, f.name):
			fr.optionProgram(prog, f)
		case ps.checkpoint && f.name == "checkpoint-action":
			if !f.litVal {
				fr.w.dynamic(prog+" --checkpoint-action", prog+" --checkpoint-action is not a literal")
				return
			}
			if cmd, ok := strings.CutPrefix(f.value, "exec="); ok {
				fr.shellString(prog+" --checkpoint-action=exec", nil, cmd, true, ctx)
			}
		}
		if fr.w.stop {
			return
		}
	}
}

// permuted reads the options of a program whose getopt takes them anywhere
// before "--", and returns its operands. A word from data where an option
// could stand makes the command dynamic: it could be the option that runs a
// program. oldStyle reads a first word without "-" as a bundle of short
// options whose values are the following words, in order (tar czf F D).
func (fr *frame) permuted(prog string, args []*syntax.Word, spec flagSpec, oldStyle bool) (operands []*syntax.Word, found []flagVal, ok bool) {
	i := 0
	if s, ok := literal(firstOr(args)); ok && oldStyle && s != "" && s[0] != '-' {
		// Old style: each letter that takes a value takes the next word.
		i = 1
		for _, c := range []byte(s) {
			switch {
			case strings.IndexByte(spec.arg, c) >= 0:
				f := flagVal{name: string(c), hasVal: true}
				if i < len(args) {
					f.value, f.litVal = literal(args[i])
					f.word = args[i]
					i++
				}
				found = append(found, f)
			case strings.IndexByte(spec.flags, c) >= 0:
				found = append(found, flagVal{name: string(c)})
			default:
				fr.w.dynamic(fr.text(args[0]), "unknown option "+string(c)+" of "+prog+": cannot tell which program it runs")
				return nil, nil, false
			}
		}
	}
	for i < len(args) {
		s, lit := literal(args[i])
		switch {
		case !lit:
			if prefix, _ := literalPrefix(args[i]); prefix == "" || prefix[0] == '-' {
				fr.w.dynamic(fr.text(args[i]), prog+"'s word comes from data and could be an option that runs a program; write -- before operands that come from variables")
				return nil, nil, false
			}
			operands = append(operands, args[i])
			i++
			continue
		case s == "--":
			return append(operands, args[i+1:]...), found, true
		case len(s) < 2 || s[0] != '-':
			operands = append(operands, args[i])
			i++
			continue
		}
		next, f, end, ok := fr.optionAt(prog, args, i, spec)
		if !ok {
			return nil, nil, false
		}
		found = append(found, f...)
		if end {
			break
		}
		i = next
	}
	return operands, found, true
}

func firstOr(args []*syntax.Word) *syntax.Word {
	if len(args) == 0 {
		return nil
	}
	return args[0]
}

// permutedWrappers are the programs described by a permutedSpec; their
// option lists come from the programs' --help (GNU coreutils 9.1, tar
// 1.34, man-db 2.11).
var permutedWrappers = map[string]*permutedSpec{
	"sort": {how: "--compress-program=PROG runs PROG (for temporary files)", prog: []string{"compress-program"},
		spec: flagSpec{flags: "bdfgiMhnRrVmsuzcC", arg: "koStT", long: []string{"ignore-leading-blanks", "dictionary-order",
			"ignore-case", "general-numeric-sort", "ignore-nonprinting", "month-sort", "human-numeric-sort", "numeric-sort",
			"random-sort", "random-source=", "reverse", "sort=", "version-sort", "batch-size=", "check?", "compress-program=",
			"debug", "files0-from=", "key=", "merge", "output=", "stable", "buffer-size=", "field-separator=",
			"temporary-directory=", "parallel=", "unique", "zero-terminated", "help", "version"}}},
	"split": {how: "--filter=COMMAND runs COMMAND through $SHELL for each output file", shell: []string{"filter"},
		spec: flagSpec{flags: "dxeu", arg: "abClnt", long: []string{"suffix-length=", "additional-suffix=", "bytes=", "line-bytes=",
			"numeric-suffixes?", "hex-suffixes?", "elide-empty-files", "filter=", "lines=", "number=", "separator=",
			"unbuffered", "verbose", "help", "version"}}},
	"install": {how: "--strip-program=PROG runs PROG (with -s)", prog: []string{"strip-program"},
		spec: flagSpec{flags: "bcCdDpsTvZ", arg: "gmoSt", long: []string{"backup?", "compare", "directory", "group=", "mode=",
			"owner=", "preserve-timestamps", "strip", "strip-program=", "suffix=", "target-directory=", "no-target-directory",
			"verbose", "preserve-context", "context?", "help", "version"}}},
	"tar": {how: "--to-command, -I/--use-compress-program, -F/--info-script/--new-volume-script and --checkpoint-action=exec= run commands through /bin/sh; --rsh-command and --rmt-command name programs; old-style bundles (tar czf) too",
		shell: []string{"to-command", "I", "use-compress-program", "F", "info-script", "new-volume-script"},
		prog:  []string{"rsh-command", "rmt-command"}, oldStyle: true, checkpoint: true,
		spec: flagSpec{flags: "AcdrtuxGnSkUWOmpsMBiajJzZhPlRvwo", arg: "gCTXfFLbHVIKN", long: tarLong}},
	"man": {how: "-P/--pager and -H/--html (the browser) run commands through a shell", shell: []string{"P", "pager", "H", "html"},
		spec: flagSpec{flags: "dDfkKlwWciIau7tXZV", arg: "CRLmMSsePrEp", optional: "THX", long: []string{"config-file=", "debug",
			"default", "warnings?", "whatis", "apropos", "global-apropos", "local-file", "where", "path", "location", "where-cat",
			"location-cat", "catman", "recode=", "locale=", "systems=", "manpath=", "sections=", "extension=", "ignore-case",
			"match-case", "regex", "wildcard", "names-only", "all", "update", "no-subpages", "pager=", "prompt=", "ascii",
			"encoding=", "no-hyphenation", "nh", "no-justification", "preprocessor=", "troff", "troff-device?", "html?",
			"gxditview?", "ditroff", "usage", "help", "version"}}},
}

// tarLong are GNU tar 1.34's long options.
var tarLong = []string{"catenate", "concatenate", "create", "delete", "diff", "compare", "append", "test-label", "list",
	"update", "extract", "get", "check-device", "listed-incremental=", "incremental", "hole-detection=", "ignore-failed-read",
	"level=", "no-check-device", "no-seek", "seek", "occurrence?", "sparse-version=", "sparse", "add-file=", "directory=",
	"exclude=", "exclude-backups", "exclude-caches", "exclude-caches-all", "exclude-caches-under", "exclude-ignore=",
	"exclude-ignore-recursive=", "exclude-tag=", "exclude-tag-all=", "exclude-tag-under=", "exclude-vcs",
	"exclude-vcs-ignores", "no-null", "no-recursion", "no-unquote", "no-verbatim-files-from", "null",
	"verbatim-files-from", "recursion", "files-from=", "unquote", "exclude-from=", "anchored", "ignore-case",
	"no-anchored", "no-ignore-case", "no-wildcards", "no-wildcards-match-slash", "wildcards", "wildcards-match-slash",
	"keep-directory-symlink", "keep-newer-files", "keep-old-files", "no-overwrite-dir", "one-top-level?", "overwrite",
	"overwrite-dir", "recursive-unlink", "remove-files", "skip-old-files", "unlink-first", "verify",
	"ignore-command-error", "no-ignore-command-error", "to-stdout", "to-command=", "atime-preserve?", "clamp-mtime",
	"delay-directory-restore", "group=", "group-map=", "mode=", "mtime=", "touch", "no-delay-directory-restore",
	"no-same-owner", "no-same-permissions", "numeric-owner", "owner=", "owner-map=", "preserve-permissions",
	"same-permissions", "same-owner", "sort=", "preserve-order", "same-order", "acls", "no-acls", "no-selinux",
	"no-xattrs", "selinux", "xattrs", "xattrs-exclude=", "xattrs-include=", "force-local", "file=", "info-script=",
	"new-volume-script=", "tape-length=", "multi-volume", "rmt-command=", "rsh-command=", "volno-file=",
	"blocking-factor=", "read-full-records", "ignore-zeros", "record-size=", "format=", "old-archive", "portability",
	"pax-option=", "posix", "label=", "auto-compress", "use-compress-program=", "bzip2", "xz", "lzip", "lzma", "lzop",
	"no-auto-compress", "zstd", "gzip", "gunzip", "ungzip", "compress", "uncompress", "backup?", "hard-dereference",
	"dereference", "starting-file=", "newer-mtime=", "newer=", "after-date=", "one-file-system", "absolute-names",
	"suffix=", "strip-components=", "transform=", "xform=", "checkpoint?", "checkpoint-action=", "full-time",
	"index-file=", "check-links", "no-quote-chars=", "quote-chars=", "quoting-style=", "block-number", "show-defaults",
	"show-omitted-dirs", "show-snapshot-field-ranges", "show-transformed-names", "show-stored-names", "totals?", "utc",
	"verbose", "warning=", "interactive", "confirmation", "restrict", "usage", "help", "version"}

// sshFlags are the options of OpenSSH 9's ssh, scp and sftp.
var sshFlags = map[string]flagSpec{
	"ssh":    {flags: "1246afgknqstvxACGKMNPTVXYy", arg: "bceilmopBDEFIJLOQRSwW"},
	"slogin": {flags: "1246afgknqstvxACGKMNPTVXYy", arg: "bceilmopBDEFIJLOQRSwW"},
	"scp":    {flags: "12346ABCTOpqRrsv", arg: "DFJPSXcilo"},
}

// ssh, slogin, scp: -o KEY=VALUE can run local commands (ProxyCommand,
// LocalCommand, KnownHostsCommand, Match exec); scp -S names the program
// used instead of ssh. What runs on the remote host is out of reach.
func (fr *frame) ssh(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	_, found, ok := fr.flags(prog, args, sshFlags[prog])
	if !ok {
		return
	}
	for _, f := range found {
		switch {
		case f.name == "S" && prog == "scp":
			fr.optionProgram(prog, f)
		case f.name == "o":
			if !f.litVal {
				fr.w.dynamic(prog+" -o", prog+" -o takes an option that is not a literal, which could run a local command")
				return
			}
			key, val, _ := strings.Cut(strings.TrimLeft(f.value, " \t"), "=")
			if k, v, spaced := strings.Cut(key, " "); spaced && !strings.Contains(f.value, "=") {
				key, val = k, v
			}
			switch strings.ToLower(strings.TrimSpace(key)) {
			case "proxycommand", "localcommand", "knownhostscommand":
				fr.shellString(prog+" -o "+key, nil, strings.TrimSpace(val), true, ctx)
			case "match":
				fr.w.dynamic(prog+" -o Match", prog+" -o Match can run a local command (Match exec)")
			}
		}
		if fr.w.stop {
			return
		}
	}
}

// rsync -e/--rsh COMMAND: the remote shell, run locally.
func (fr *frame) rsync(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	fr.commandOption(prog, "-e", args, ctx, func(s string) (string, bool, bool) {
		if v, ok := strings.CutPrefix(s, "--rsh="); ok {
			return v, true, true
		}
		if s == "--rsh" {
			return "", false, true
		}
		// A cluster with -e: the rest of it, or the next word, is the
		// command (reading more clusters this way than rsync does only
		// refuses more).
		if len(s) > 1 && s[0] == '-' && s[1] != '-' && strings.IndexByte(s, 'e') > 0 {
			v := s[strings.IndexByte(s, 'e')+1:]
			return v, v != "", true
		}
		return "", false, false
	})
}

// zip -TT COMMAND / --unzip-command COMMAND tests the archive with a shell
// command.
func (fr *frame) zip(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	fr.commandOption(prog, "-TT", args, ctx, func(s string) (string, bool, bool) {
		for _, name := range []string{"-TT", "--unzip-command"} {
			if s == name {
				return "", false, true
			}
			if v, ok := strings.CutPrefix(s, name+"="); ok {
				return v, true, true
			}
		}
		return "", false, false
	})
}

// commandOption reads the words of a program whose options may come
// anywhere before "--", for the option (named opt in messages) whose value
// is a command string run by a shell. match says whether a word is that
// option, and gives its value when attached to the word; otherwise the
// next word is the value.
func (fr *frame) commandOption(prog, opt string, args []*syntax.Word, ctx callCtx, match func(string) (value string, attached, ok bool)) {
	for i := 0; i < len(args) && !fr.w.stop; i++ {
		s, lit := literal(args[i])
		if !lit {
			if prefix, _ := literalPrefix(args[i]); prefix == "" || prefix[0] == '-' {
				fr.w.dynamic(fr.text(args[i]), prog+"'s word comes from data and could be "+opt+" COMMAND; write -- before operands that come from variables")
				return
			}
			continue
		}
		if s == "--" {
			return
		}
		v, attached, ok := match(s)
		switch {
		case !ok:
		case attached:
			fr.shellString(prog+" "+opt, nil, v, true, ctx)
		case i+1 < len(args):
			i++
			v, lit := literal(args[i])
			fr.shellString(prog+" "+opt, args[i], v, lit, ctx)
		}
	}
}

// capsh [--name[=value] ...] [-- ARGS | == ARGS | -+ ARGS | =+ ARGS]:
// "--" and "-+" run the shell (/bin/bash, or --shell=) with ARGS; "==" and
// "=+" run capsh again with them.
func (fr *frame) capsh(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	shellName := "bash"
	for i := 0; i < len(args); i++ {
		s, ok := literal(args[i])
		if !ok {
			fr.w.dynamic(fr.text(args[i]), prog+" is given an argument that is not a literal")
			return
		}
		switch {
		case s == "--" || s == "-+":
			fr.w.program(shellName)
			fr.shell(shellName, args[i+1:], redirs, ctx)
			return
		case s == "==" || s == "=+":
			fr.w.program(prog)
			fr.capsh(prog, args[i+1:], redirs, ctx)
			return
		case strings.HasPrefix(s, "--shell="):
			shellName = baseName(strings.TrimPrefix(s, "--shell="))
		case strings.HasPrefix(s, "--") && slices.Contains(capshOptions, strings.SplitN(s[2:], "=", 2)[0]):
		case s == "-h":
		default:
			fr.w.dynamic(fr.text(args[i]), "unknown option "+s+" of "+prog+": cannot tell which program it runs")
			return
		}
	}
}

// capshOptions are capsh's options (libcap 2.66).
var capshOptions = []string{"addamb", "cap-uid", "caps", "chroot", "current", "decode", "delamb", "drop", "explain",
	"forkfor", "gid", "groups", "has-a", "has-b", "has-ambient", "has-i", "has-p", "has-no-new-privs", "help", "iab",
	"inh", "inmode", "is-uid", "is-gid", "keep", "killit", "license", "mode", "modes", "no-new-privs", "noamb", "noenv",
	"print", "quiet", "secbits", "strict", "suggest", "supports", "uid", "user", "launch"}

// sg [-] [GROUP [-c] COMMAND]: COMMAND runs through /bin/sh -c; without
// one, the user's shell reads standard input. newgrp [-] [GROUP] runs that
// shell.
func (fr *frame) sg(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	if len(args) > 0 {
		if s, ok := literal(args[0]); ok && s == "-" {
			args = args[1:]
		}
	}
	if len(args) > 0 {
		args = args[1:] // the group
	}
	if prog == "sg" && len(args) > 0 {
		if s, ok := literal(args[0]); ok && s == "-c" {
			args = args[1:]
		}
	}
	if prog != "sg" || len(args) == 0 {
		if ctx.appended {
			fr.noProgram(prog, ctx)
			return
		}
		fr.stdinScript(prog, redirs, ctx)
		return
	}
	if len(args) > 1 {
		fr.w.dynamic(fr.text(args[1]), prog+" is given more than one command word")
		return
	}
	s, ok := literal(args[0])
	fr.shellString(prog+" -c", args[0], s, ok, ctx)
}

// runcon CONTEXT PROGRAM [ARGS], or runcon [-c] [-u USER] [-r ROLE]
// [-t TYPE] [-l RANGE] PROGRAM [ARGS].
func (fr *frame) runcon(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	rest, found, dashdash, ok := fr.flagsEnd(prog, args, flagSpec{flags: "c", arg: "turl",
		long: []string{"compute", "type=", "user=", "role=", "range=", "help", "version"}})
	if !ok {
		return
	}
	at := 0
	if len(found) == 0 {
		at = 1 // the CONTEXT operand
	}
	if len(rest) <= at {
		return // prints the current context
	}
	if at == 1 && !dashdash {
		if _, ok := literal(rest[0]); !ok {
			fr.w.dynamic(fr.text(rest[0]), prog+"'s operand comes from data and could be an option; write -- before it")
			return
		}
	}
	fr.call(rest[at:], redirs, ctx)
}

// dynamicWrapper refuses a program whose way of running others the policy
// cannot follow, unless it is only asked to report.
func (fr *frame) dynamicWrapper(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	d := dynamicWrappers[prog]
	for _, a := range args {
		if s, ok := literal(a); ok && slices.Contains(d.safe, s) {
			return // it reports and exits before running anything
		}
	}
	fr.w.dynamic(prog, prog+" runs programs in a way the policy cannot follow: "+d.how)
}

// customHow says how the wrappers with their own handlers take their
// command.
var customHow = map[string]string{
	"env":       "options (-i, -u NAME, -C DIR, -S STRING split into words), NAME=VALUE, then the program",
	"sudo":      "options (-u USER ...), NAME=VALUE, then the program; -s/-i without one, a shell reading standard input; -e runs an editor (dynamic)",
	"doas":      "options (-u USER), then the program; -s, a shell reading standard input",
	"su":        "options, USER, then arguments for the user's shell (-c COMMAND), or -s SHELL; runuser -u USER runs a program",
	"runuser":   "as su",
	"xargs":     "options, then the program with arguments from standard input (echo without one); -I STRING substitutes data",
	"find":      "-exec/-execdir/-ok/-okdir PROGRAM ... ; or +, with {} substituted",
	"flock":     "options, FILE, then the program, or -c COMMAND run by a shell",
	"watch":     "its words joined and run by sh -c; -x runs them as a program",
	"busybox":   "APPLET, then the applet's arguments",
	"toybox":    "as busybox",
	"command":   "options, then the program (-v/-V only look it up)",
	"builtin":   "the builtin, then its arguments",
	"eval":      "its arguments joined and run as shell code",
	"trap":      "ACTION run as shell code later",
	"alias":     "NAME=VALUE, whose value becomes command text",
	"hash":      "-p PATH NAME makes NAME run PATH",
	"enable":    "-f FILE loads a builtin from a shared object (dynamic); -n disables builtins",
	"source":    "a script file (not read), or standard input",
	".":         "as source",
	"mapfile":   "-C CALLBACK run as shell code",
	"readarray": "as mapfile",
	"ssh":       "-o ProxyCommand=/LocalCommand=/KnownHostsCommand= run local commands through a shell, -o Match exec too (dynamic); the remote command is out of reach",
	"slogin":    "as ssh",
	"scp":       "as ssh, and -S PROGRAM instead of ssh",
	"rsync":     "-e/--rsh COMMAND runs locally as the remote shell",
	"zip":       "-TT/--unzip-command COMMAND tests the archive through a shell",
	"capsh":     "-- ARGS (or -+) runs /bin/bash (or --shell=) with ARGS; == (or =+) runs capsh again",
	"sg":        "GROUP [-c] COMMAND run by /bin/sh -c; without one, the user's shell reading standard input",
	"newgrp":    "runs the user's shell, reading standard input",
	"runcon":    "CONTEXT then the program, or options (-t, -u, -r, -l, -c) then the program",
}

// wrapperDocs says, for every wrapper the policy follows or refuses, how it
// takes its command.
func wrapperDocs() map[string]string {
	docs := map[string]string{}
	for name, how := range customHow {
		docs[name] = how
	}
	for name, ws := range specWrappers {
		docs[name] = ws.how
	}
	for _, name := range archNames {
		docs[name] = "setarch for its architecture: options, then the program; without one, /bin/sh reading standard input"
	}
	for _, name := range []string{"fakeroot-sysv", "fakeroot-tcp"} {
		docs[name] = "as fakeroot"
	}
	for name, ps := range permutedWrappers {
		docs[name] = ps.how
	}
	for name, d := range dynamicWrappers {
		docs[name] = "refused (dynamic) with lists set: " + d.how
	}
	return docs
}
