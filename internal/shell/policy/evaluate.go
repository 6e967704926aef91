package policy

import (
	"path"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Bash evaluates some words twice: once when it expands them, and again as
// an arithmetic expression or a variable reference. In that second pass a
// variable operand's value is itself evaluated, and a subscript found in it
// (a[$(cmd)]) is expanded, command substitutions included. A variable set in
// an earlier command to 'a[$(rm x)]' therefore runs rm in `echo $((x))`,
// `[[ $x -eq 0 ]]`, `printf -v "$x"`, `test -v "$x"`, `${!x}` ... although
// the command text holds no substitution. With lists set, such a word is
// refused unless the text shows everything bash will evaluate: integer
// literals, and parameters whose value the shell itself sets to a number
// ($#, $?, $$, $!, ${#name}). The rules and the places are listed in the
// package documentation.

// ReservedPrefix starts the names of the variables and functions of the
// session's command loop. With lists set, a command that names one is
// refused: what the loop evaluates must come only from the engine.
const ReservedPrefix = "__nx_"

// framingBuiltins are the builtins the session's command loop calls once commands have run
// (internal/shell's framing, which a test there holds to this list): a function of that name
// would run in their place, so defining one, or disabling the builtin with enable -n, is
// refused when lists are set.
var framingBuiltins = map[string]bool{
	"read": true, "printf": true, "eval": true, "set": true, "command": true, "[": true, "break": true,
}

// ReservedBuiltin reports whether name is a builtin the session's command loop calls, which a
// session with lists may not replace with a function or disable.
func ReservedBuiltin(name string) bool { return framingBuiltins[name] }

// integerVars have the integer attribute in a new bash (RANDOM, SECONDS,
// OPTIND ...): a value assigned to them is evaluated arithmetically.
var integerVars = map[string]bool{
	"RANDOM": true, "SRANDOM": true, "SECONDS": true, "OPTIND": true, "HISTCMD": true,
	"BASHPID": true, "EUID": true, "UID": true, "PPID": true, "LINENO": true,
}

// codeVars hold shell code: the prompts (their command substitutions run
// when they are printed; PS4 under set -x), PROMPT_COMMAND (run before a
// prompt), BASH_ENV and ENV (expanded, substitutions included, when a
// non-interactive bash or a POSIX shell starts).
var codeVars = map[string]bool{
	"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true,
	"PROMPT_COMMAND": true, "BASH_ENV": true, "ENV": true,
}

// later records a finding about evaluated data. It is reported after the
// walk, so that a program the lists refuse, found anywhere in the command,
// is the reason given first.
func (w *walker) later(kind findingKind, text, detail string) {
	if w.stop {
		return
	}
	w.deferred = append(w.deferred, finding{kind: kind, name: text, detail: detail})
}

func (w *walker) arithmetic(text, detail string) { w.later(findArithmetic, text, detail) }

func (w *walker) reserved(text, detail string) { w.later(findReserved, text, detail) }

// arith walks an expression bash evaluates arithmetically: its
// substitutions are inspected like any other, and each operand must be
// visible in the text.
func (fr *frame) arith(x syntax.ArithmExpr, where string) {
	if x == nil || fr.w.stop {
		return
	}
	fr.arithm(x)
	if fr.w.stop {
		return
	}
	if bad := unsafeOperand(x); bad != nil {
		fr.w.arithmetic(fr.text(bad), where+" evaluates the value of "+operandKind(bad)+" as an arithmetic expression")
	}
}

// unsafeOperand returns the first operand of x whose value bash would
// evaluate without the text showing it, or nil.
func unsafeOperand(x syntax.ArithmExpr) syntax.Node {
	switch x := x.(type) {
	case *syntax.BinaryArithm:
		if bad := unsafeOperand(x.X); bad != nil {
			return bad
		}
		return unsafeOperand(x.Y)
	case *syntax.UnaryArithm:
		return unsafeOperand(x.X)
	case *syntax.ParenArithm:
		return unsafeOperand(x.X)
	case *syntax.FlagsArithm:
		return unsafeOperand(x.X)
	case *syntax.Word:
		if safeArithWord(x) {
			return nil
		}
		return x
	case nil:
		return nil
	default:
		return x
	}
}

func operandKind(n syntax.Node) string {
	w, ok := n.(*syntax.Word)
	if !ok {
		return "an operand"
	}
	if s, lit := literal(w); lit {
		if isName(s) || strings.ContainsRune(s, '[') {
			return "the variable " + clip(s)
		}
		return "an operand that is not an integer literal"
	}
	if hasSubst(w) {
		return "a command's output"
	}
	return "a parameter"
}

// safeArithWord reports whether an arithmetic operand (or a whole
// expression given as one word, as in [[ x -eq y ]]) evaluates only what
// the text shows.
func safeArithWord(w *syntax.Word) bool {
	if w == nil {
		return true
	}
	if s, ok := literal(w); ok {
		return arithLiteral(s)
	}
	if len(w.Parts) != 1 {
		return false
	}
	part := w.Parts[0]
	if dq, ok := part.(*syntax.DblQuoted); ok && !dq.Dollar && len(dq.Parts) == 1 {
		part = dq.Parts[0]
	}
	pe, ok := part.(*syntax.ParamExp)
	return ok && numericParam(pe)
}

// numericParam reports whether a parameter expansion always yields a number
// set by the shell: $#, $?, $$, $! and lengths ${#name}, ${#a[@]}.
func numericParam(pe *syntax.ParamExp) bool {
	if pe.Param == nil || pe.Excl || pe.Slice != nil || pe.Repl != nil || pe.Exp != nil || pe.Names != 0 || pe.NestedParam != nil {
		return false
	}
	if pe.Length {
		return true // the subscript of ${#a[i]} is checked where it appears
	}
	if pe.Index != nil {
		return false
	}
	switch pe.Param.Value {
	case "#", "?", "$", "!":
		return true
	}
	return false
}

// arithLiteral reports whether s, read as an arithmetic expression,
// references no variable: numbers (decimal, 0x, octal, base#digits),
// operators, parentheses and blanks only.
func arithLiteral(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			// A constant runs over letters, @, _ and # (0xff, 64#Az@_):
			// none of it names a variable.
			for i+1 < len(s) && isConstByte(s[i+1]) {
				i++
			}
		case strings.IndexByte(" \t\n+-*/%<>=!&|^~?:,()", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isConstByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '@' || c == '#'
}

// isName reports whether s is a shell variable name.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

// splitRef splits a variable reference NAME or NAME[SUBSCRIPT] (with the
// brackets balanced, as bash finds them). rest is what follows the
// reference (an assignment's "=value" or "+=value"). ok is false when s
// does not start with a name.
func splitRef(s string) (name, sub string, hasSub bool, rest string, ok bool) {
	i := 0
	for i < len(s) && (s[i] == '_' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || (i > 0 && s[i] >= '0' && s[i] <= '9')) {
		i++
	}
	if i == 0 {
		return "", "", false, s, false
	}
	name = s[:i]
	if i == len(s) || s[i] != '[' {
		return name, "", false, s[i:], true
	}
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '[':
			depth++
		case ']':
			depth--
			if depth == 0 {
				return name, s[i+1 : j], true, s[j+1:], true
			}
		}
	}
	// An unclosed subscript: bash rejects the name, but say it is one so
	// that the caller's subscript check refuses it.
	return name, s[i+1:], true, "", true
}

// allElements reports whether a subscript is @ or *.
func allElements(x syntax.ArithmExpr) bool {
	w, ok := x.(*syntax.Word)
	if !ok || len(w.Parts) != 1 {
		return false
	}
	l, ok := w.Parts[0].(*syntax.Lit)
	return ok && (l.Value == "@" || l.Value == "*")
}

// refText returns the text of a word that names a variable: a literal, or
// an unquoted NAME[SUB] with a plain subscript. Bash could glob the latter,
// but only into file names of NAME and one more character, which hold no
// subscript.
func refText(w *syntax.Word) (string, bool) {
	if s, ok := literal(w); ok {
		return s, true
	}
	var b strings.Builder
	for _, part := range w.Parts {
		l, ok := part.(*syntax.Lit)
		if !ok {
			return "", false
		}
		b.WriteString(l.Value)
	}
	s := b.String()
	_, sub, hasSub, rest, isRef := splitRef(s)
	if !isRef || !hasSub || rest != "" || strings.ContainsAny(sub, "?[]\\{}") {
		return "", false
	}
	return s, true
}

// refName checks a variable name written in the command (an assignment, a
// loop variable, a {fd} redirection, a declaration): the session's names
// are reserved.
func (fr *frame) refName(name, text string) bool {
	if strings.HasPrefix(name, ReservedPrefix) {
		fr.w.reserved(text, "the session's command loop owns the names starting with "+ReservedPrefix)
		return false
	}
	return true
}

// target checks a variable that a builtin assigns, named by the word wd
// (read NAME, printf -v NAME, mapfile NAME, getopts OPT NAME ...). The name
// must be a literal: a subscript in a name given by data is evaluated.
// fromData says the value assigned comes from input rather than from the
// text, so it must not land in a variable bash evaluates.
func (fr *frame) target(wd *syntax.Word, who string, fromData bool) {
	s, ok := refText(wd)
	if !ok {
		fr.w.arithmetic(fr.text(wd), who+" assigns to a variable named by data; bash evaluates the subscript of such a name")
		return
	}
	fr.targetString(s, fr.text(wd), who, fromData, false)
}

// targetString checks a literal variable reference s; text quotes it.
func (fr *frame) targetString(s, text, who string, fromData, allowAll bool) {
	name, sub, hasSub, _, ok := splitRef(s)
	if !ok {
		return // not a name: bash refuses it without evaluating anything
	}
	if !fr.refName(name, text) {
		return
	}
	if hasSub && (!allowAll || (sub != "@" && sub != "*")) && !arithLiteral(sub) {
		fr.w.arithmetic(text, who+": the subscript ["+clip(sub)+"] is evaluated arithmetically")
		return
	}
	if !fromData || hasSub {
		return
	}
	switch {
	case integerVars[name]:
		fr.w.arithmetic(text, who+" assigns data to "+name+", an integer variable: bash evaluates the value arithmetically")
	case codeVars[name]:
		fr.w.dynamic(text, who+" sets "+name+" from data, and its value runs as code")
	}
}

// assignedValue checks the value a command assigns to name in the text
// (NAME=value, declare NAME=value, ${NAME:=value}).
func (fr *frame) assignedValue(name string, value *syntax.Word, node syntax.Node) {
	switch {
	case integerVars[name]:
		if !safeArithWord(value) {
			fr.w.arithmetic(fr.text(node), name+" is an integer variable: bash evaluates the value assigned to it arithmetically")
		}
	case codeVars[name]:
		v, ok := literal(value)
		if !ok {
			fr.w.dynamic(fr.text(node), name+" is set to a value that is not a literal")
			return
		}
		fr.codeValue(name, v)
	}
}

// codeValue inspects the literal value of a variable holding shell code.
func (fr *frame) codeValue(name, v string) {
	if name == "PROMPT_COMMAND" {
		fr.w.source(v, fr.depth+1, name)
		return
	}
	fr.prompt(v, name)
}

// fdPathRedirect refuses a redirection to a path that names an open file
// descriptor of a process (/dev/fd/N, /proc/PID/fd/N): through it a command
// could reach the session's command stream. /dev/fd/0, 1 and 2 are the
// command's own streams. A path whose start is built at run time, a
// relative path or a link made earlier cannot be judged from the text.
func (fr *frame) fdPathRedirect(r *syntax.Redirect) {
	if r.Word == nil {
		return
	}
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return
	}
	prefix, whole := literalPrefix(r.Word)
	if !strings.HasPrefix(prefix, "/") {
		return
	}
	p := path.Clean(prefix)
	inFD := p == "/dev/fd" || strings.HasPrefix(p, "/dev/fd/")
	inProc := p == "/proc" || strings.HasPrefix(p, "/proc/")
	switch {
	case whole && inFD && (p == "/dev/fd/0" || p == "/dev/fd/1" || p == "/dev/fd/2"):
		return
	case whole && inProc && !strings.Contains(p+"/", "/fd/"):
		return
	case !inFD && !inProc:
		return
	}
	fr.w.reserved(fr.text(r.Word), "a redirection to a process's file descriptor could reach the session's command stream")
}

// literalPrefix returns the text of w's leading literal parts, and whether
// that is all of w.
func literalPrefix(w *syntax.Word) (string, bool) {
	if s, ok := literal(w); ok {
		return s, true
	}
	var b strings.Builder
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return b.String(), false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, dp := range p.Parts {
				l, ok := dp.(*syntax.Lit)
				if !ok {
					return b.String(), false
				}
				b.WriteString(l.Value)
			}
		default:
			return b.String(), false
		}
	}
	return b.String(), false
}

// MinShellFD is the lowest file descriptor the shell keeps for itself:
// bash and dash save descriptors from 10 up, and the session's command
// loop reads its command stream from one of them. With lists set, a
// command may not name such a descriptor, nor one given by data: it could
// close the stream and open its own in its place, whose text the loop
// would run unchecked.
const MinShellFD = 10

// fdRedirect checks the descriptors a redirection names: the one it
// redirects (N> or {NAME}>) and, for <& and >&, the one it copies.
func (fr *frame) fdRedirect(r *syntax.Redirect) {
	const why = "descriptors from 10 up belong to the shell, which reads the session's command stream from one"
	closes := false
	if r.Op == syntax.DplIn || r.Op == syntax.DplOut {
		s, ok := literal(r.Word)
		switch {
		case !ok:
			fr.w.reserved(fr.text(r.Word), "a redirection copies a descriptor given by data; "+why)
			return
		case s == "-":
			closes = true
		case isNumber(strings.TrimSuffix(s, "-")):
			if n, _ := strconv.Atoi(strings.TrimSuffix(s, "-")); n >= MinShellFD {
				fr.w.reserved(fr.text(r.Word), why)
				return
			}
		}
	}
	if r.N == nil {
		return
	}
	switch n := r.N.Value; {
	case strings.HasPrefix(n, "{"):
		if closes {
			fr.w.reserved(n, "closing a descriptor named by a variable could close the shell's own; "+why)
		}
	default:
		if v, err := strconv.Atoi(n); err == nil && v >= MinShellFD {
			fr.w.reserved(n+">", why)
		}
	}
}

// fdOperand checks a descriptor given to a builtin (read -u FD): a literal
// below MinShellFD.
func (fr *frame) fdOperand(who string, f flagVal) {
	if n, err := strconv.Atoi(f.value); !f.litVal || err != nil || n >= MinShellFD || n < 0 {
		fr.w.reserved(who+" "+clip(f.value), who+" reads a descriptor that is not a literal below 10; descriptors from 10 up belong to the shell")
	}
}
