package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// The builtins that assign variables by name or evaluate words: their
// arguments are checked as the rules on evaluated data require (see
// evaluate.go and the package documentation).

// funcName checks the name of a function being defined.
func (fr *frame) funcName(name string, node syntax.Node) {
	if !fr.refName(name, fr.text(node)) {
		return
	}
	if framingBuiltins[name] {
		fr.w.reserved(fr.text(node), "a function named "+name+" would replace the builtin the session's command loop calls")
	}
}

// decl checks declare, typeset, local, export, readonly (and mksh's
// nameref) written as a declaration.
func (fr *frame) decl(c *syntax.DeclClause) {
	variant := c.Variant.Value
	fr.w.program(variant)
	if fr.w.stop {
		return
	}
	// Options come first; the first operand ends them, as in bash.
	var opts strings.Builder
	i := 0
	for ; i < len(c.Args); i++ {
		a := c.Args[i]
		if !a.Naked || a.Name != nil || a.Value == nil {
			break
		}
		s, ok := literal(a.Value)
		if !ok || len(s) < 2 || (s[0] != '-' && s[0] != '+') {
			break
		}
		if s == "--" {
			i++
			break
		}
		if s[0] == '-' {
			opts.WriteString(s[1:])
		}
	}
	o := opts.String()
	if variant != "export" && variant != "readonly" {
		switch {
		case variant == "nameref" || strings.Contains(o, "n"):
			fr.w.arithmetic(fr.text(c), variant+" -n makes a name reference: every use of the name evaluates its target, subscript included, and a later assignment or for loop can set the target")
			return
		case strings.Contains(o, "i"):
			fr.w.arithmetic(fr.text(c), variant+" -i gives the integer attribute: bash evaluates every value later assigned to the name arithmetically")
			return
		}
	}
	funcs := strings.ContainsAny(o, "fF")
	// declare, typeset and local evaluate a value of the form (...) as
	// an array assignment when the name is an array; export and readonly
	// too when given -a or -A.
	compound := (variant != "export" && variant != "readonly") || strings.ContainsAny(o, "aA")
	assoc := strings.Contains(o, "A")
	for _, a := range c.Args[i:] {
		if fr.w.stop {
			return
		}
		if a.Name == nil {
			fr.word(a.Value)
			s, ok := literal(a.Value)
			if !ok {
				fr.w.arithmetic(fr.text(a.Value), variant+" takes a name (and its subscript) from data")
				continue
			}
			if funcs {
				fr.refName(s, fr.text(a.Value))
				continue
			}
			fr.declString(variant, s, a.Value, compound)
			continue
		}
		if funcs {
			fr.refName(a.Name.Value, fr.text(a.Name))
			continue
		}
		fr.assign(a, assoc)
		if !compound || a.Value == nil || a.Naked {
			continue
		}
		v, ok := literal(a.Value)
		switch {
		case !ok:
			fr.w.arithmetic(fr.text(a), variant+" evaluates a value of the form (...) as an array assignment when the name is an array; assign it on its own (`"+variant+" NAME; NAME=...`)")
		case strings.HasPrefix(v, "("):
			fr.w.source(a.Name.Value+"="+v, fr.depth+1, variant+" NAME='(...)'")
		}
	}
}

// declString checks a declaration argument written as one word,
// NAME[SUB][=VALUE] after quote removal ('a[1]=x').
func (fr *frame) declString(variant, s string, node syntax.Node, compound bool) {
	name, sub, hasSub, rest, ok := splitRef(s)
	if !ok {
		return // not a name: bash refuses it
	}
	if !fr.refName(name, fr.text(node)) {
		return
	}
	if hasSub && !arithLiteral(sub) {
		fr.w.arithmetic(fr.text(node), variant+": the subscript ["+clip(sub)+"] is evaluated arithmetically")
		return
	}
	rest = strings.TrimPrefix(rest, "+")
	v, hasValue := strings.CutPrefix(rest, "=")
	if !hasValue || hasSub {
		return
	}
	switch {
	case integerVars[name]:
		if !arithLiteral(v) {
			fr.w.arithmetic(fr.text(node), name+" is an integer variable: bash evaluates the value assigned to it arithmetically")
		}
	case codeVars[name]:
		fr.codeValue(name, v)
	case compound && strings.HasPrefix(v, "("):
		fr.w.source(name+"="+v, fr.depth+1, variant+" 'NAME=(...)'")
	}
}

// declCall checks a declaration reached as a plain command (builtin
// declare ..., command local ...): its words are parsed again as a
// declaration, which is how bash reads them.
func (fr *frame) declCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	if len(args) == 0 {
		return
	}
	start, end := args[0].Pos().Offset(), args[len(args)-1].End().Offset()
	if !args[0].Pos().IsValid() || start > end || end > uint(len(fr.src)) {
		fr.w.arithmetic(prog, prog+" with arguments the policy cannot place")
		return
	}
	src := prog + " " + fr.src[start:end]
	if !fr.w.charge(src) {
		return
	}
	p := parserPool.Get().(*syntax.Parser)
	f, err := p.Parse(strings.NewReader(src), "")
	parserPool.Put(p)
	if err != nil || len(f.Stmts) != 1 {
		fr.w.arithmetic(prog, prog+" with arguments the policy cannot read as a declaration")
		return
	}
	d, ok := f.Stmts[0].Cmd.(*syntax.DeclClause)
	if !ok {
		fr.w.arithmetic(prog, prog+" with arguments the policy cannot read as a declaration")
		return
	}
	sub := &frame{w: fr.w, src: src, depth: fr.depth}
	sub.decl(d)
}

// let evaluates each argument arithmetically.
func (fr *frame) letCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	for _, a := range args {
		if !safeArithWord(a) {
			fr.w.arithmetic(fr.text(a), prog+" evaluates "+operandKind(a)+" as an arithmetic expression")
			return
		}
	}
}

// read [-ers] [-a array] [-d delim] [-i text] [-n n] [-N n] [-p prompt]
// [-t timeout] [-u fd] [name ...]
func (fr *frame) readCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	rest, found, ok := fr.builtinFlags(prog, args, flagSpec{flags: "ers", arg: "adinNptu"})
	if !ok {
		return
	}
	if f, ok := hasFlag(found, "a"); ok {
		fr.flagTarget(prog+" -a", f, true)
	}
	if f, ok := hasFlag(found, "u"); ok {
		fr.fdOperand(prog+" -u", f)
	}
	for _, a := range rest {
		fr.target(a, prog, true)
	}
}

// printf [-v name] format [arguments]
func (fr *frame) printfCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	if len(args) == 0 {
		return
	}
	s, ok := literal(args[0])
	switch {
	case !ok:
		// The first word could expand to -v (the next word is then the
		// name) or to -vNAME, unless its visible start says otherwise.
		if prefix, _ := literalPrefix(args[0]); (prefix == "" || prefix[0] == '-') && len(args) > 1 {
			fr.w.arithmetic(fr.text(args[0]), prog+"'s first argument could expand to -v NAME, and a subscript in NAME is evaluated; write the format literally")
		}
	case s == "-v":
		if len(args) > 1 {
			fr.target(args[1], prog+" -v", true)
		}
	case strings.HasPrefix(s, "-v"):
		fr.targetString(s[2:], fr.text(args[0]), prog+" -v", true, false)
	}
}

// mapfile/readarray [-d delim] [-n count] [-O origin] [-s count] [-t]
// [-u fd] [-C callback] [-c quantum] [array]
func (fr *frame) mapfile(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	rest, found, ok := fr.builtinFlags(prog, args, flagSpec{flags: "t", arg: "dnOsuCc"})
	if !ok {
		return
	}
	if f, ok := hasFlag(found, "C"); ok {
		fr.shellString(prog+" -C", f.word, f.value, f.litVal, ctx)
	}
	if f, ok := hasFlag(found, "u"); ok {
		fr.fdOperand(prog+" -u", f)
	}
	for _, a := range rest {
		fr.target(a, prog, true)
	}
}

// getopts optstring name [arg ...]
func (fr *frame) getoptsCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	if len(args) > 1 {
		fr.target(args[1], prog, true)
	}
}

// wait [-fn] [-p varname] [id ...]
func (fr *frame) waitCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	_, found, ok := fr.builtinFlags(prog, args, flagSpec{flags: "fn", arg: "p"})
	if !ok {
		return
	}
	if f, ok := hasFlag(found, "p"); ok {
		fr.flagTarget(prog+" -p", f, false)
	}
}

// unset [-f] [-v] [-n] [name ...]: a subscript in a name is evaluated.
func (fr *frame) unsetCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	rest, found, ok := fr.builtinFlags(prog, args, flagSpec{flags: "fvn"})
	if !ok {
		return
	}
	_, funcs := hasFlag(found, "f")
	for _, a := range rest {
		s, ok := refText(a)
		switch {
		case !ok && funcs:
			fr.w.reserved(fr.text(a), prog+" -f removes a function named by data, which could be one the session's command loop calls")
		case !ok:
			fr.w.arithmetic(fr.text(a), prog+" removes a variable named by data; bash evaluates the subscript of such a name")
		case funcs:
			fr.refName(s, fr.text(a))
		default:
			fr.targetString(s, fr.text(a), prog, false, true)
		}
	}
}

// test / [: `-v NAME` evaluates NAME's subscript. The operator can come
// from data as well as the operand: an unquoted expansion may split into
// both, and a quoted one may be the operator.
func (fr *frame) testCall(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	if prog == "[" && len(args) > 0 {
		if s, ok := literal(args[len(args)-1]); ok && s == "]" {
			args = args[:len(args)-1]
		}
	}
	for _, a := range args {
		if fieldsOf(a) == fieldsMany {
			fr.w.arithmetic(fr.text(a), prog+": an unquoted expansion could split into -v and a name with a subscript; quote it")
			return
		}
	}
	for i := 0; i+1 < len(args); i++ {
		if !couldBe(args[i], "-v") {
			continue
		}
		// args[i] is -v, or data that could be: args[i+1] is a name
		// whose subscript would be evaluated.
		next := args[i+1]
		s, ok := refText(next)
		if !ok {
			fr.w.arithmetic(fr.text(next), prog+" -v evaluates the subscript of a variable name given by data (the operator may come from data too)")
			return
		}
		if _, sub, hasSub, _, isRef := splitRef(s); isRef && hasSub && !arithLiteral(sub) && sub != "@" && sub != "*" {
			fr.w.arithmetic(fr.text(next), prog+" -v evaluates the subscript ["+clip(sub)+"]")
			return
		}
	}
}

// compgen/complete: -C runs a command string, -W expands a word list
// (command substitutions included), -V names a variable.
func (fr *frame) completion(prog string, args []*syntax.Word, _ []*syntax.Redirect, ctx callCtx) {
	_, found, ok := fr.builtinFlags(prog, args, flagSpec{flags: "abcdefgjksuvpDEIr", arg: "oAGWFCXPSV"})
	if !ok {
		return
	}
	for _, f := range found {
		switch f.name {
		case "C":
			fr.shellString(prog+" -C", f.word, f.value, f.litVal, ctx)
		case "W":
			if !f.litVal {
				fr.w.dynamic(prog+" -W", prog+" -W expands a word list that is not a literal")
				return
			}
			if !fr.w.charge(f.value) {
				return
			}
			words, err := splitWords(f.value)
			if err != nil {
				fr.w.report(finding{kind: findUnparsable, name: clip(f.value), detail: prog + " -W: " + err.Error()})
				return
			}
			sub := &frame{w: fr.w, src: f.value, depth: fr.depth + 1}
			for _, wd := range words {
				sub.word(wd)
			}
		case "V":
			fr.flagTarget(prog+" -V", f, true)
		}
		if fr.w.stop {
			return
		}
	}
}

// enable [-a] [-dnps] [-f filename] [name ...]: -f loads a builtin from a
// shared object; -n disables builtins, which must not be the ones the
// session's command loop calls.
func (fr *frame) enable(prog string, args []*syntax.Word, _ []*syntax.Redirect, _ callCtx) {
	disable := false
	for _, a := range args {
		s, ok := literal(a)
		if !ok || (strings.HasPrefix(s, "-") && strings.ContainsAny(s, "f")) {
			fr.w.dynamic(fr.text(a), prog+" -f loads a builtin from a shared object")
			return
		}
		if strings.HasPrefix(s, "-") {
			disable = disable || strings.Contains(s, "n")
			continue
		}
		if disable && framingBuiltins[s] {
			fr.w.reserved(fr.text(a), prog+" -n disables a builtin the session's command loop calls")
			return
		}
	}
}

// builtinFlags parses a builtin's options. An option the spec does not
// know makes the builtin fail before it assigns anything: ok is then false
// and there is nothing to check.
func (fr *frame) builtinFlags(prog string, args []*syntax.Word, spec flagSpec) (rest []*syntax.Word, found []flagVal, ok bool) {
scan:
	for i := 0; i < len(args); i++ {
		s, lit := literal(args[i])
		if !lit || len(s) < 2 || s[0] != '-' || s == "--" {
			break
		}
		for j := 1; j < len(s); j++ {
			switch {
			case strings.IndexByte(spec.arg, s[j]) >= 0:
				if j == len(s)-1 {
					i++ // the argument is the next word
				}
				continue scan
			case strings.IndexByte(spec.flags, s[j]) < 0:
				return nil, nil, false
			}
		}
	}
	return fr.flags(prog, args, spec)
}

// flagTarget checks the variable named by an option's argument.
func (fr *frame) flagTarget(who string, f flagVal, fromData bool) {
	switch {
	case f.word != nil:
		fr.target(f.word, who, fromData)
	case f.litVal:
		fr.targetString(f.value, who+" "+clip(f.value), who, fromData, false)
	default:
		fr.w.arithmetic(who, who+" names a variable by data")
	}
}

// fields says how many fields a word expands to.
type fields int

const (
	fieldsOne  fields = iota // exactly one (a literal, or expansions inside double quotes)
	fieldsMany               // unquoted expansions or globs: zero, one or many
)

func fieldsOf(w *syntax.Word) fields {
	if _, ok := refText(w); ok {
		return fieldsOne
	}
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "*?[") {
				return fieldsMany
			}
		case *syntax.SglQuoted:
		case *syntax.DblQuoted:
			for _, dp := range p.Parts {
				if pe, ok := dp.(*syntax.ParamExp); ok && multiField(pe) {
					return fieldsMany
				}
			}
		case *syntax.ParamExp:
			if !numericParam(p) {
				return fieldsMany
			}
		case *syntax.ArithmExp, *syntax.ProcSubst:
			// A number, or a /dev/fd path: one field.
		default:
			return fieldsMany
		}
	}
	return fieldsOne
}

// couldBe reports whether w may expand to the single field s: it is that
// literal, or an expansion whose visible start is a prefix of s.
func couldBe(w *syntax.Word, s string) bool {
	prefix, whole := literalPrefix(w)
	if whole {
		return prefix == s
	}
	return strings.HasPrefix(s, prefix)
}

// multiField reports whether "${...}" expands to several fields ("$@",
// "${a[@]}", "${!prefix@}").
func multiField(pe *syntax.ParamExp) bool {
	if pe.Names != 0 {
		return true
	}
	if pe.Param != nil && (pe.Param.Value == "@" || pe.Param.Value == "*") && !pe.Length {
		return true
	}
	return pe.Index != nil && allElements(pe.Index) && !pe.Length
}

// builtinChecks are the builtins in the wrapper table whose arguments are
// checked for evaluated data; they run no program.
var builtinChecks = map[string]bool{
	"declare": true, "typeset": true, "local": true, "export": true, "readonly": true, "let": true, "read": true,
	"printf": true, "getopts": true, "wait": true, "unset": true, "test": true, "[": true, "compgen": true, "complete": true,
}
