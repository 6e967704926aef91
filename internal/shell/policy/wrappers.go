package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// posixShells take -c STRING and are parsed recursively.
var posixShells = map[string]bool{
	"sh": true, "bash": true, "rbash": true, "dash": true, "ash": true,
	"zsh": true, "ksh": true, "ksh93": true, "mksh": true, "lksh": true,
	"pdksh": true, "oksh": true, "loksh": true, "yash": true, "posh": true,
}

// foreignShells run commands in a language this parser does not speak: a
// command string or standard input for them is dynamic.
var foreignShells = map[string]bool{
	"fish": true, "csh": true, "tcsh": true, "nu": true, "pwsh": true,
	"powershell": true, "xonsh": true, "elvish": true, "rc": true, "es": true,
}

// call analyzes the argument vector of a simple command: the program it
// names and, through wrappers, every program it makes run.
func (fr *frame) call(args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	w := fr.w
	if len(args) == 0 || w.stop {
		return
	}
	if !fr.enter() {
		return
	}
	defer fr.leave()
	first := args[0]
	if ctx.placeholder != "" && wordContains(first, ctx.placeholder) {
		fr.w.dynamic(fr.text(first), "the program name is substituted from data ("+ctx.placeholder+")")
		return
	}
	name, ok := literal(first)
	if !ok {
		w.dynamic(fr.text(first), "dynamic command name: it is only known when the shell expands it")
		return
	}
	base := baseName(name)
	w.program(name)
	if w.stop {
		return
	}
	if strings.HasPrefix(base, ReservedPrefix) {
		w.reserved(fr.text(first), "the functions starting with "+ReservedPrefix+" belong to the session's command loop")
		return
	}
	rest := args[1:]
	switch prog := strings.ToLower(base); {
	case posixShells[prog]:
		fr.shell(prog, rest, redirs, ctx)
	case foreignShells[prog]:
		fr.foreignShell(prog, rest)
	default:
		if h, ok := wrappers[prog]; ok {
			h(fr, prog, rest, redirs, ctx)
		}
	}
}

// noProgram is what a wrapper does when it was given no program to run.
func (fr *frame) noProgram(prog string, ctx callCtx) {
	if ctx.appended {
		fr.w.dynamic(prog, prog+" under xargs takes its program from the input")
	}
}

type wrapperFunc func(fr *frame, prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx)

var wrappers map[string]wrapperFunc

func init() {
	// Assigned in init: the handlers refer to call, which refers to
	// this table.
	wrappers = map[string]wrapperFunc{
		"env":     (*frame).env,
		"sudo":    (*frame).sudo,
		"doas":    (*frame).doas,
		"su":      (*frame).su,
		"runuser": (*frame).su,
		"xargs":   (*frame).xargs,
		"find":    (*frame).find,
		"flock":   (*frame).flock,
		"watch":   (*frame).watch,
		"busybox": (*frame).busybox,
		"toybox":  (*frame).busybox,
		"command": (*frame).commandBuiltin,
		"builtin": func(fr *frame, _ string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
			fr.call(args, redirs, ctx)
		},
		"eval":      (*frame).eval,
		"trap":      (*frame).trap,
		"alias":     (*frame).alias,
		"hash":      (*frame).hash,
		"enable":    (*frame).enable,
		"source":    (*frame).sourceBuiltin,
		".":         (*frame).sourceBuiltin,
		"mapfile":   (*frame).mapfile,
		"readarray": (*frame).mapfile,
		"ssh":       (*frame).ssh,
		"slogin":    (*frame).ssh,
		"scp":       (*frame).ssh,
		"rsync":     (*frame).rsync,
		"zip":       (*frame).zip,
		"capsh":     (*frame).capsh,
		"sg":        (*frame).sg,
		"newgrp":    (*frame).sg,
		"runcon":    (*frame).runcon,
		// Builtins that assign variables by name or evaluate words.
		"declare":  (*frame).declCall,
		"typeset":  (*frame).declCall,
		"local":    (*frame).declCall,
		"export":   (*frame).declCall,
		"readonly": (*frame).declCall,
		"let":      (*frame).letCall,
		"read":     (*frame).readCall,
		"printf":   (*frame).printfCall,
		"getopts":  (*frame).getoptsCall,
		"wait":     (*frame).waitCall,
		"unset":    (*frame).unsetCall,
		"test":     (*frame).testCall,
		"[":        (*frame).testCall,
		"compgen":  (*frame).completion,
		"complete": (*frame).completion,
	}
	for name, ws := range specWrappers {
		wrappers[name] = ws.run
	}
	for _, name := range archNames {
		a := *specWrappers["setarch"]
		a.how, a.lead = "setarch for its architecture: options, then the program; without one, /bin/sh reading standard input", 0
		wrappers[name] = a.run
	}
	for name, ps := range permutedWrappers {
		wrappers[name] = ps.run
	}
	for name := range dynamicWrappers {
		wrappers[name] = (*frame).dynamicWrapper
	}
	for _, name := range []string{"fakeroot-sysv", "fakeroot-tcp"} {
		wrappers[name] = specWrappers["fakeroot"].run
	}
}

// flagSpec describes the options of a wrapper, as its getopt string would.
type flagSpec struct {
	flags    string   // short options without an argument
	arg      string   // short options with a required argument
	optional string   // short options with an optional argument (attached only)
	long     []string // long options: "name", "name=" (argument), "name?" (optional, attached with =)
	numeric  bool     // -N is an option (nice -5)
}

// flagVal is one option found on a command line.
type flagVal struct {
	name   string // the short letter or the full long name
	value  string // its argument, if any
	hasVal bool
	litVal bool // the argument is a static literal
	word   *syntax.Word
}

// flags parses the options at the start of args, stopping at the first
// operand or "--" (wrappers that run a program stop there, like getopt
// with "+"). A non-literal word is an operand. An option the spec does not
// know makes the command dynamic: the program it runs cannot be told.
func (fr *frame) flags(prog string, args []*syntax.Word, spec flagSpec) (rest []*syntax.Word, found []flagVal, ok bool) {
	rest, found, _, ok = fr.flagsEnd(prog, args, spec)
	return rest, found, ok
}

// flagsEnd is flags, also saying whether the options ended with "--" (after
// which no word is an option, whatever it expands to).
func (fr *frame) flagsEnd(prog string, args []*syntax.Word, spec flagSpec) (rest []*syntax.Word, found []flagVal, dashdash, ok bool) {
	i := 0
	for i < len(args) {
		s, lit := literal(args[i])
		if !lit || len(s) < 2 || s[0] != '-' {
			break
		}
		if s == "--" {
			i++
			dashdash = true
			break
		}
		next, f, end, ok := fr.optionAt(prog, args, i, spec)
		if !ok {
			return nil, nil, false, false
		}
		found = append(found, f...)
		if end {
			return nil, found, false, true
		}
		i = next
	}
	return args[i:], found, dashdash, true
}

// optionAt parses the option word args[i] (a literal starting with "-",
// not "--") and the next word when an option in it takes that as its
// value. It returns the index after what it used and the options found. ok
// is false after an option the spec does not know, which it reports as
// dynamic; end is set when an option's value is missing (a usage error:
// nothing runs).
func (fr *frame) optionAt(prog string, args []*syntax.Word, i int, spec flagSpec) (next int, found []flagVal, end, ok bool) {
	s, _ := literal(args[i])
	if strings.HasPrefix(s, "--") {
		if spec.numeric && isNumber(s[2:]) {
			return i + 1, nil, false, true // nice --10: a negative adjustment
		}
		name, val, hasEq := strings.Cut(s[2:], "=")
		full, kind, known := matchLong(spec.long, name)
		if !known {
			fr.w.dynamic(fr.text(args[i]), "unknown option "+s+" of "+prog+": cannot tell which program it runs")
			return 0, nil, false, false
		}
		f := flagVal{name: full}
		switch {
		case hasEq:
			f.value, f.hasVal, f.litVal = val, true, true
		case kind == '=':
			if i+1 >= len(args) {
				return len(args), nil, true, true
			}
			i++
			f.value, f.litVal = literal(args[i])
			f.hasVal, f.word = true, args[i]
		}
		return i + 1, []flagVal{f}, false, true
	}
	if spec.numeric && isNumber(s[1:]) {
		return i + 1, nil, false, true
	}
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case strings.IndexByte(spec.flags, c) >= 0:
			found = append(found, flagVal{name: string(c)})
			continue
		case strings.IndexByte(spec.optional, c) >= 0:
			f := flagVal{name: string(c)}
			if j+1 < len(s) {
				f.value, f.hasVal, f.litVal = s[j+1:], true, true
			}
			return i + 1, append(found, f), false, true
		case strings.IndexByte(spec.arg, c) >= 0:
			f := flagVal{name: string(c), hasVal: true}
			switch {
			case j+1 < len(s):
				f.value, f.litVal = s[j+1:], true
			case i+1 < len(args):
				i++
				f.value, f.litVal = literal(args[i])
				f.word = args[i]
			default:
				return len(args), found, true, true
			}
			return i + 1, append(found, f), false, true
		default:
			fr.w.dynamic(fr.text(args[i]), "unknown option -"+string(c)+" of "+prog+": cannot tell which program it runs")
			return 0, nil, false, false
		}
	}
	return i + 1, found, false, true
}

// matchLong finds a long option by its full name or an unambiguous prefix,
// as getopt_long does. kind is '=' (takes an argument), '?' (optional) or 0.
func matchLong(long []string, name string) (full string, kind byte, ok bool) {
	var cands []string
	for _, l := range long {
		n, k := l, byte(0)
		if last := l[len(l)-1]; last == '=' || last == '?' {
			n, k = l[:len(l)-1], last
		}
		if n == name {
			return n, k, true
		}
		if strings.HasPrefix(n, name) && name != "" {
			cands = append(cands, l)
			full, kind = n, k
		}
	}
	if len(cands) == 1 {
		return full, kind, true
	}
	return "", 0, false
}

func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func hasFlag(found []flagVal, names ...string) (flagVal, bool) {
	for _, f := range found {
		for _, n := range names {
			if f.name == n {
				return f, true
			}
		}
	}
	return flagVal{}, false
}

// wordContains reports whether a word's literal text contains sub; a word
// that is not fully literal is searched in its literal parts.
func wordContains(wd *syntax.Word, sub string) bool {
	if s, ok := literal(wd); ok {
		return strings.Contains(s, sub)
	}
	for _, p := range wd.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.Contains(p.Value, sub) {
				return true
			}
		case *syntax.SglQuoted:
			if strings.Contains(p.Value, sub) {
				return true
			}
		case *syntax.DblQuoted:
			for _, dp := range p.Parts {
				if l, ok := dp.(*syntax.Lit); ok && strings.Contains(l.Value, sub) {
					return true
				}
			}
		}
	}
	return false
}

// shellString inspects a command string a program will run through a
// shell (sh -c, eval, su -c, flock -c, watch ...).
func (fr *frame) shellString(prog string, wd *syntax.Word, s string, lit bool, ctx callCtx) {
	if !lit {
		text := prog
		if wd != nil {
			text = fr.text(wd)
		}
		fr.w.dynamic(text, prog+" runs a command string that is not a literal")
		return
	}
	if ctx.placeholder != "" && strings.Contains(s, ctx.placeholder) {
		fr.w.dynamic(clip(s), prog+" runs a command string with "+ctx.placeholder+" substituted from data")
		return
	}
	fr.w.source(s, fr.depth+1, prog)
}

// shell handles sh, bash, zsh ... : -c STRING is parsed; a script read
// from standard input is parsed when it is a literal here-document or
// here-string and is dynamic otherwise; a script file is not inspected.
func (fr *frame) shell(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	cmdMode, stdinMode := false, false
	i := 0
options:
	for i < len(args) {
		s, lit := literal(args[i])
		if !lit || len(s) == 0 || (s[0] != '-' && s[0] != '+') {
			break
		}
		switch {
		case s == "-" || s == "--":
			i++
			break options
		case strings.HasPrefix(s, "--"):
			i++
			switch s {
			case "--rcfile", "--init-file":
				i++
			}
			continue
		case len(s) == 1: // "+"
			break options
		}
		skip := 0
		for _, c := range s[1:] {
			switch c {
			case 'c':
				cmdMode = true
			case 's':
				stdinMode = true
			case 'o', 'O':
				skip++
			}
		}
		i += 1 + skip
	}
	var operands []*syntax.Word
	if i < len(args) {
		operands = args[i:]
	}
	switch {
	case cmdMode:
		if len(operands) == 0 {
			fr.noProgram(prog+" -c", ctx)
			return
		}
		s, lit := literal(operands[0])
		fr.shellString(prog+" -c", operands[0], s, lit, ctx)
	case stdinMode || len(operands) == 0:
		if ctx.appended && len(operands) == 0 {
			fr.w.dynamic(prog, prog+" under xargs runs a script named by the input")
			return
		}
		fr.stdinScript(prog, redirs, ctx)
	default:
		fr.scriptOperand(prog, operands[0], redirs, ctx)
	}
}

// scriptOperand handles a script path given to a shell or to source: a
// file is not inspected (the policy sees command lines, not files); a path
// naming standard input or a file descriptor, or produced by a
// substitution, is dynamic.
func (fr *frame) scriptOperand(prog string, wd *syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	if hasSubst(wd) {
		fr.w.dynamic(fr.text(wd), prog+" runs a script produced by a command substitution")
		return
	}
	if s, ok := literal(wd); ok && isFDPath(s) {
		if s == "/dev/stdin" || s == "/dev/fd/0" || strings.HasSuffix(s, "/fd/0") {
			fr.stdinScript(prog, redirs, ctx)
			return
		}
		fr.w.dynamic(fr.text(wd), prog+" runs a script from a file descriptor")
	}
}

// stdinScript handles a shell reading its commands from standard input.
func (fr *frame) stdinScript(prog string, redirs []*syntax.Redirect, ctx callCtx) {
	var in *syntax.Redirect
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			in = r
		}
	}
	if in == nil {
		fr.w.dynamic(prog, prog+" reads commands from standard input (a pipe, or what the caller gives it)")
		return
	}
	switch in.Op {
	case syntax.Hdoc, syntax.DashHdoc:
		body, ok := heredocBody(in)
		fr.shellString(prog+" here-document", in.Hdoc, body, ok, ctx)
	case syntax.WordHdoc:
		s, ok := literal(in.Word)
		fr.shellString(prog+" here-string", in.Word, s, ok, ctx)
	case syntax.RdrIn, syntax.RdrInOut:
		// A script file is not inspected; a substitution or a file
		// descriptor is a script made by commands.
		s, ok := literal(in.Word)
		if hasSubst(in.Word) || (ok && isFDPath(s)) {
			fr.w.dynamic(fr.text(in.Word), prog+" reads commands produced by other commands")
		}
	default:
		fr.w.dynamic(fr.text(in.Word), prog+" reads commands from a duplicated file descriptor")
	}
}

// heredocBody returns the text of a here-document when it is static.
func heredocBody(r *syntax.Redirect) (string, bool) {
	if r.Hdoc == nil {
		return "", true
	}
	quoted := false
	if r.Word != nil {
		for _, p := range r.Word.Parts {
			l, ok := p.(*syntax.Lit)
			if !ok || strings.ContainsRune(l.Value, '\\') {
				quoted = true
			}
		}
	}
	var b strings.Builder
	for _, p := range r.Hdoc.Parts {
		l, ok := p.(*syntax.Lit)
		if !ok {
			return "", false
		}
		if quoted {
			b.WriteString(l.Value)
		} else {
			b.WriteString(unescapeHeredoc(l.Value))
		}
	}
	return b.String(), true
}

// foreignShell: fish, csh ... run commands in another language; a command
// string or a script on standard input for them is dynamic, a script file
// is not inspected.
func (fr *frame) foreignShell(prog string, args []*syntax.Word) {
	script := false
	for _, a := range args {
		s, ok := literal(a)
		if !ok {
			fr.w.dynamic(fr.text(a), prog+" is given an argument that is not a literal")
			return
		}
		if s == "-c" || s == "-C" || strings.HasPrefix(s, "--command") || s == "-Command" || s == "-EncodedCommand" {
			fr.w.dynamic(prog, prog+" runs a command string in a language the policy cannot parse")
			return
		}
		if !strings.HasPrefix(s, "-") {
			script = true
			break
		}
	}
	if !script {
		fr.w.dynamic(prog, prog+" reads commands from standard input")
	}
}

// env [options] [-S string] [NAME=VALUE ...] [program args...]
func (fr *frame) env(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	spec := flagSpec{
		flags: "i0v",
		arg:   "uCS",
		long: []string{"unset=", "chdir=", "split-string=", "ignore-environment", "null", "debug",
			"default-signal?", "ignore-signal?", "block-signal?", "list-signal-handling", "help", "version"},
	}
	cur := fr
	for range MaxDepth {
		rest, found, ok := cur.flags(prog, args, spec)
		if !ok {
			return
		}
		if f, ok := hasFlag(found, "S", "split-string"); ok {
			if !f.litVal {
				cur.w.dynamic(prog+" -S", prog+" -S splits a string that is not a literal")
				return
			}
			if !cur.w.charge(f.value) {
				return
			}
			words, err := splitWords(f.value)
			if err != nil {
				cur.w.report(finding{kind: findUnparsable, name: clip(f.value), detail: prog + " -S: " + err.Error()})
				return
			}
			// The split words replace the option; parse again.
			cur = &frame{w: fr.w, src: f.value, depth: fr.depth + 1}
			args = append(words, rest...)
			continue
		}
		for len(rest) > 0 {
			s, ok := literal(rest[0])
			if !ok || (s != "-" && !isAssignment(s)) {
				break
			}
			if strings.HasPrefix(s, "BASH_FUNC_") {
				cur.w.dynamic(clip(s), "an exported bash function runs in the child shell")
				return
			}
			cur.envAssignment(s, rest[0])
			rest = rest[1:]
		}
		if len(rest) == 0 {
			cur.noProgram(prog, ctx)
			return
		}
		cur.call(rest, redirs, ctx)
		return
	}
	fr.w.report(finding{kind: findLimit, name: prog, detail: "env -S nested too deep"})
}

// envAssignment checks NAME=VALUE given to env or sudo: the child shell
// evaluates the variables that hold code (PS4, BASH_ENV ...).
func (fr *frame) envAssignment(s string, wd *syntax.Word) {
	name, v, _ := strings.Cut(s, "=")
	if codeVars[name] {
		fr.codeValue(name, v)
	}
	fr.refName(name, fr.text(wd))
}

// splitWords splits an env -S string into shell-like words.
func splitWords(s string) ([]*syntax.Word, error) {
	p := parserPool.Get().(*syntax.Parser)
	defer parserPool.Put(p)
	var words []*syntax.Word
	for wd, err := range p.WordsSeq(strings.NewReader(s)) {
		if err != nil {
			return nil, err
		}
		words = append(words, wd)
	}
	return words, nil
}

// sudo [options] [NAME=VALUE ...] [program args...]
func (fr *frame) sudo(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	spec := flagSpec{
		flags:    "ABbEeHiKklNnPSsVv",
		arg:      "aCcDgpRrTtUu",
		optional: "h",
		long: []string{"askpass", "bell", "background", "close-from=", "chdir=", "preserve-env?", "edit",
			"group=", "set-home", "help", "host=", "login", "remove-timestamp", "reset-timestamp", "list",
			"non-interactive", "preserve-groups", "prompt=", "chroot=", "role=", "stdin", "shell", "type=",
			"command-timeout=", "other-user=", "user=", "version", "validate", "auth-type=", "login-class="},
	}
	rest, found, ok := fr.flags(prog, args, spec)
	if !ok {
		return
	}
	if _, ok := hasFlag(found, "e", "edit"); ok {
		fr.w.dynamic(prog+" -e", prog+" -e runs the editor named by SUDO_EDITOR, VISUAL or EDITOR")
		return
	}
	for len(rest) > 0 {
		s, ok := literal(rest[0])
		if !ok || !isAssignment(s) {
			break
		}
		fr.envAssignment(s, rest[0])
		rest = rest[1:]
	}
	if len(rest) == 0 {
		if _, ok := hasFlag(found, "s", "shell", "i", "login"); ok {
			fr.stdinScript(prog+" -s", redirs, ctx)
			return
		}
		fr.noProgram(prog, ctx)
		return
	}
	fr.call(rest, redirs, ctx)
}

// doas [-Lns] [-a style] [-C config] [-u user] [program args...]
func (fr *frame) doas(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	rest, found, ok := fr.flags(prog, args, flagSpec{flags: "Lns", arg: "aCu"})
	if !ok {
		return
	}
	if len(rest) == 0 {
		if _, ok := hasFlag(found, "s"); ok {
			fr.stdinScript(prog+" -s", redirs, ctx)
			return
		}
		fr.noProgram(prog, ctx)
		return
	}
	fr.call(rest, redirs, ctx)
}

// su / runuser [options] [-] [user [shell args...]]; options may follow the
// user (getopt permutes them).
func (fr *frame) su(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	spec := flagSpec{
		flags: "flmpPhV",
		arg:   "cgGswuTZ",
		long: []string{"command=", "session-command=", "group=", "supp-group=", "login", "preserve-environment",
			"pty", "shell=", "whitelist-environment=", "fast", "help", "version", "user="},
	}
	var operands []*syntax.Word
	var found []flagVal
	for len(args) > 0 {
		s, lit := literal(args[0])
		if lit && s == "--" {
			operands = append(operands, args[1:]...)
			break
		}
		if lit && s == "-" {
			args = args[1:]
			continue
		}
		rest, f, ok := fr.flags(prog, args, spec)
		if !ok {
			return
		}
		found = append(found, f...)
		if len(rest) == len(args) {
			operands = append(operands, args[0])
			rest = args[1:]
		}
		args = rest
	}
	if f, ok := hasFlag(found, "s", "shell"); ok {
		if !f.litVal {
			fr.w.dynamic(prog+" -s", prog+" -s names a shell that is not a literal")
			return
		}
		fr.w.program(f.value)
	}
	if f, ok := hasFlag(found, "c", "command", "session-command"); ok {
		fr.shellString(prog+" -c", f.word, f.value, f.litVal, ctx)
		return
	}
	if _, ok := hasFlag(found, "u", "user"); ok {
		// runuser -u USER [--] program args...: run directly.
		if len(operands) == 0 {
			fr.noProgram(prog, ctx)
			return
		}
		fr.call(operands, redirs, ctx)
		return
	}
	// After the user name, the arguments go to the user's shell.
	if len(operands) > 0 {
		operands = operands[1:]
	}
	fr.shell(prog, operands, redirs, ctx)
}

// xargs [options] [program [initial-arguments]]
func (fr *frame) xargs(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	spec := flagSpec{
		flags:    "0oprtx",
		arg:      "adEILnPs",
		optional: "eil",
		long: []string{"arg-file=", "delimiter=", "eof?", "replace?", "max-lines?", "max-args=", "max-procs=",
			"max-chars=", "process-slot-var=", "null", "no-run-if-empty", "interactive", "verbose", "exit",
			"open-tty", "show-limits", "help", "version"},
	}
	rest, found, ok := fr.flags(prog, args, spec)
	if !ok {
		return
	}
	sub := callCtx{appended: true}
	if f, ok := hasFlag(found, "I", "i", "replace"); ok {
		switch {
		case !f.hasVal && f.name != "I":
			sub = callCtx{placeholder: "{}"}
		case !f.litVal || f.value == "":
			fr.w.dynamic(prog+" -I", prog+" -I uses a replacement string that is not a literal")
			return
		default:
			sub = callCtx{placeholder: f.value}
		}
	}
	if len(rest) == 0 {
		// xargs without a program runs echo.
		rest = []*syntax.Word{wordFromString("echo")}
	}
	// The program's standard input is not the command's: no redirects.
	fr.call(rest, nil, sub)
}

// find ... -exec program args... ; (also -execdir, -ok, -okdir)
func (fr *frame) find(_ string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	for i := 0; i < len(args); i++ {
		s, ok := literal(args[i])
		if !ok {
			continue
		}
		switch s {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(args) {
			t, ok := literal(args[j])
			if ok && (t == ";" || t == "+") {
				break
			}
			j++
		}
		fr.call(args[i+1:j], nil, callCtx{placeholder: "{}"})
		if fr.w.stop {
			return
		}
		i = j
	}
}

// flock [options] file|dir program args... ; flock [options] file -c string;
// flock [options] fd.
func (fr *frame) flock(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	rest, found, dashdash, ok := fr.flagsEnd(prog, args, flagSpec{flags: "sexnoFuhV", arg: "wEc",
		long: []string{"shared", "exclusive", "unlock", "nonblock", "nb", "close", "no-fork", "timeout=", "wait=",
			"conflict-exit-code=", "verbose", "command=", "help", "version"}})
	if !ok {
		return
	}
	if len(rest) > 1 && !dashdash {
		if _, ok := literal(rest[0]); !ok {
			fr.w.dynamic(fr.text(rest[0]), prog+"'s lock file comes from data and could be an option; write -- before it")
			return
		}
	}
	if f, ok := hasFlag(found, "c", "command"); ok {
		fr.shellString(prog+" -c", f.word, f.value, f.litVal, ctx)
		return
	}
	if len(rest) <= 1 {
		return // flock fd: no program
	}
	if s, ok := literal(rest[1]); ok && (s == "-c" || s == "--command") {
		if len(rest) < 3 {
			return
		}
		str, lit := literal(rest[2])
		fr.shellString(prog+" -c", rest[2], str, lit, ctx)
		return
	}
	fr.call(rest[1:], redirs, ctx)
}

// watch [options] command...: the words are joined and run by sh -c, or
// executed directly with -x.
func (fr *frame) watch(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	rest, found, ok := fr.flags(prog, args, flagSpec{flags: "bceghprtwxv", arg: "nq", optional: "d",
		long: []string{"beep", "color", "no-color", "differences?", "errexit", "chgexit", "equexit=", "exec",
			"help", "interval=", "no-rerun", "no-title", "no-wrap", "no-linewrap", "precise", "version"}})
	if !ok {
		return
	}
	if len(rest) == 0 {
		fr.noProgram(prog, ctx)
		return
	}
	if _, ok := hasFlag(found, "x", "exec"); ok {
		fr.call(rest, redirs, ctx)
		return
	}
	parts := make([]string, 0, len(rest))
	for _, a := range rest {
		s, ok := literal(a)
		if !ok {
			fr.shellString(prog, a, "", false, ctx)
			return
		}
		parts = append(parts, s)
	}
	fr.shellString(prog, nil, strings.Join(parts, " "), true, ctx)
}

// busybox applet args...
func (fr *frame) busybox(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	if len(args) > 0 {
		if s, ok := literal(args[0]); ok && strings.HasPrefix(s, "-") {
			return // --install, --list, --help
		}
	}
	if len(args) == 0 {
		fr.noProgram(prog, ctx)
		return
	}
	fr.call(args, redirs, ctx)
}

// command [-pVv] program args...: -v and -V only look the name up.
func (fr *frame) commandBuiltin(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	rest, found, ok := fr.flags(prog, args, flagSpec{flags: "pvV"})
	if !ok {
		return
	}
	if _, ok := hasFlag(found, "v", "V"); ok {
		return
	}
	if len(rest) == 0 {
		fr.noProgram(prog, ctx)
		return
	}
	fr.call(rest, redirs, ctx)
}

// eval joins its arguments and runs them as a command line.
func (fr *frame) eval(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	if len(args) > 0 {
		if s, ok := literal(args[0]); ok && s == "--" {
			args = args[1:]
		}
	}
	parts := make([]string, 0, len(args))
	for _, a := range args {
		s, ok := literal(a)
		if !ok {
			fr.shellString(prog, a, "", false, ctx)
			return
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return
	}
	fr.shellString(prog, nil, strings.Join(parts, " "), true, ctx)
}

// trap [--] action signal...: the action runs later, checked now.
func (fr *frame) trap(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	if len(args) > 0 {
		if s, ok := literal(args[0]); ok && s == "--" {
			args = args[1:]
		}
	}
	if len(args) < 2 {
		return // trap, trap -l, trap -p, trap SIG (reset)
	}
	s, ok := literal(args[0])
	if ok && (s == "-" || s == "" || s == "-p" || s == "-l" || s == "-P") {
		return
	}
	fr.shellString(prog, args[0], s, ok, ctx)
}

// alias name=value...: an alias's value becomes command text later.
func (fr *frame) alias(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	for _, a := range args {
		s, ok := literal(a)
		if !ok {
			fr.shellString(prog, a, "", false, ctx)
			return
		}
		if strings.HasPrefix(s, "-") {
			continue
		}
		if _, v, ok := strings.Cut(s, "="); ok {
			fr.shellString(prog, a, v, true, ctx)
			if fr.w.stop {
				return
			}
		}
	}
}

// hash -p path name makes name run path.
func (fr *frame) hash(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	_, found, ok := fr.flags(prog, args, flagSpec{flags: "lrdt", arg: "p"})
	if !ok {
		return
	}
	if f, ok := hasFlag(found, "p"); ok {
		if !f.litVal {
			fr.w.dynamic(prog+" -p", prog+" -p names a program that is not a literal")
			return
		}
		fr.w.program(f.value)
	}
}

// source file / . file: a file is not inspected; standard input, a file
// descriptor or a substitution is handled like a shell's script.
func (fr *frame) sourceBuiltin(prog string, args []*syntax.Word, redirs []*syntax.Redirect, ctx callCtx) {
	if len(args) > 0 {
		if s, ok := literal(args[0]); ok && s == "--" {
			args = args[1:]
		}
	}
	if len(args) == 0 {
		return
	}
	fr.scriptOperand(prog, args[0], redirs, ctx)
}
