package policy

import (
	"fmt"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// Limits of the static inspection. A command beyond them is reported as
// uninspectable (and refused by a policy with lists); they bound the time and
// the stack the parser may use on hostile input.
const (
	// MaxInspectBytes is the largest command (and the largest total of
	// nested shell strings) that is parsed.
	MaxInspectBytes = 256 << 10
	// MaxNesting bounds the bracket nesting of a command, estimated by a
	// scan before parsing, and the nesting of the parsed syntax tree.
	MaxNesting = 200
	// MaxDepth bounds how many shell strings deep (bash -c inside eval
	// inside sh -c ...) the inspection follows.
	MaxDepth = 8
	// maxTreeDepth bounds the recursion of the walker over one syntax tree.
	maxTreeDepth = 1000
)

// findingKind says what the inspection found.
type findingKind int

const (
	// findProgram: a program the command would run (by base name).
	findProgram findingKind = iota
	// findDynamic: a command whose program cannot be known statically.
	findDynamic
	// findUnparsable: a command (or a nested shell string) that does not
	// parse.
	findUnparsable
	// findLimit: a command too large or too deeply nested to inspect.
	findLimit
	// findArithmetic: a word bash evaluates arithmetically, or as a
	// variable reference, whose value is not visible in the text.
	findArithmetic
	// findReserved: a command that reaches the session's own state (its
	// variables, functions, descriptors or the builtins it relies on).
	findReserved
	// findFile: a file the command's text names (a redirection's target or
	// an argument word); no policy rule applies to it (see Inspect).
	findFile
)

// finding is one thing the walker reports.
type finding struct {
	kind findingKind
	// name is the program base name (findProgram) or the source text of
	// the unresolvable part.
	name string
	// written is a program's name as the command gives it, after quote
	// removal ("./bin/echo" where name is "echo").
	written string
	// detail explains a non-program finding.
	detail string
	// file is what a findFile finding names.
	file *FileRef
}

// callCtx is what a command inherits from the program that runs it.
type callCtx struct {
	// placeholder is the string that find -exec ({}) or xargs -I
	// substitutes with data; in a program name or a shell string it
	// makes the command dynamic.
	placeholder string
	// appended is set under xargs without -I: arguments read from
	// standard input are appended, so a missing program or shell
	// string comes from data.
	appended bool
}

// walker inspects one command. emit returns false to stop the walk.
type walker struct {
	emit     func(finding) bool
	stop     bool
	budget   int       // bytes left for parsing nested shell strings
	tree     int       // current recursion depth over syntax trees
	steps    int       // nodes entered, in all: the walker's work
	deferred []finding // findings about evaluated data, reported after the walk
}

var parserPool = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }}

// inspect walks every command that command would run and reports them.
func inspect(command string, emit func(finding) bool) {
	inspectWork(command, emit)
}

// inspectWork is inspect, returning the work done: the bytes handed to the
// parser (command and nested shell strings) and the syntax nodes walked.
func inspectWork(command string, emit func(finding) bool) (parsed, steps int) {
	w := &walker{emit: emit, budget: MaxInspectBytes}
	w.source(command, 0, "")
	for _, f := range w.deferred {
		w.report(f)
	}
	return MaxInspectBytes - w.budget, w.steps
}

// charge counts src against the bytes the parser may be given in all,
// reporting the limit when they run out.
func (w *walker) charge(src string) bool {
	if len(src) > w.budget {
		w.report(finding{kind: findLimit, name: clip(src), detail: fmt.Sprintf("more than %d bytes to inspect", MaxInspectBytes)})
		return false
	}
	w.budget -= len(src)
	return true
}

func (w *walker) report(f finding) {
	if w.stop {
		return
	}
	if !w.emit(f) {
		w.stop = true
	}
}

func (w *walker) dynamic(text, detail string) {
	w.report(finding{kind: findDynamic, name: text, detail: detail})
}

// program reports a program by the name it is given (a path or a bare
// name); the lists match its base name.
func (w *walker) program(written string) {
	name := baseName(written)
	if name == "" {
		return // "" is "command not found": nothing runs
	}
	w.report(finding{kind: findProgram, name: name, written: written})
}

// source parses src, a whole command line or a shell string found inside one
// (bash -c, eval, trap, alias ...), and walks it. where names the origin of a
// nested string for messages.
func (w *walker) source(src string, depth int, where string) {
	if w.stop {
		return
	}
	if depth > MaxDepth {
		w.report(finding{kind: findLimit, name: clip(src), detail: fmt.Sprintf("shell strings nested more than %d deep", MaxDepth)})
		return
	}
	if !w.charge(src) {
		return
	}
	if n := bracketNesting(src); n > MaxNesting {
		w.report(finding{kind: findLimit, name: clip(src), detail: fmt.Sprintf("nested more than %d levels deep", MaxNesting)})
		return
	}
	p := parserPool.Get().(*syntax.Parser)
	f, err := p.Parse(strings.NewReader(src), "")
	parserPool.Put(p)
	if err != nil {
		detail := err.Error()
		if where != "" {
			detail = where + ": " + detail
		}
		w.report(finding{kind: findUnparsable, name: clip(src), detail: detail})
		return
	}
	fr := &frame{w: w, src: src, depth: depth}
	fr.stmts(f.Stmts)
}

// bracketNesting estimates the deepest bracket nesting of src without
// parsing it, ignoring quoting. The parser recurses once or more per level
// and a deeply nested input can exhaust the stack, so this runs first.
func bracketNesting(src string) int {
	depth, deepest := 0, 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '(', '[', '{':
			depth++
			if depth > deepest {
				deepest = depth
			}
		case ')', ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return deepest
}

// clip shortens text quoted in a finding.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// frame walks one parsed source.
type frame struct {
	w     *walker
	src   string
	depth int
}

// text returns the source text of a node.
func (fr *frame) text(n syntax.Node) string {
	start, end := n.Pos().Offset(), n.End().Offset()
	if start <= end && end <= uint(len(fr.src)) {
		return clip(fr.src[start:end])
	}
	return "?"
}

func (fr *frame) enter() bool {
	w := fr.w
	if w.stop {
		return false
	}
	w.tree++
	w.steps++
	if w.tree > maxTreeDepth {
		w.report(finding{kind: findLimit, name: clip(fr.src), detail: fmt.Sprintf("syntax tree deeper than %d levels", maxTreeDepth)})
		return false
	}
	return true
}

func (fr *frame) leave() { fr.w.tree-- }

func (fr *frame) stmts(ss []*syntax.Stmt) {
	for _, s := range ss {
		fr.stmt(s)
	}
}

func (fr *frame) stmt(s *syntax.Stmt) {
	if s == nil || !fr.enter() {
		return
	}
	defer fr.leave()
	for _, r := range s.Redirs {
		fr.word(r.Word)
		fr.word(r.Hdoc)
		if r.N != nil && strings.HasPrefix(r.N.Value, "{") {
			// {NAME}>file stores the descriptor in NAME.
			fr.targetString(strings.Trim(r.N.Value, "{}"), r.N.Value, "a {name} redirection", false, false)
		}
		fr.fdPathRedirect(r)
		fr.fdRedirect(r)
		fr.redirectFile(r)
	}
	fr.command(s.Cmd, s.Redirs)
}

func (fr *frame) command(c syntax.Command, redirs []*syntax.Redirect) {
	switch c := c.(type) {
	case nil:
	case *syntax.CallExpr:
		for _, a := range c.Assigns {
			fr.assign(a, false)
		}
		for _, a := range c.Args {
			fr.word(a)
		}
		if len(c.Args) > 1 {
			for _, a := range c.Args[1:] {
				fr.argFile(a)
			}
		}
		fr.call(c.Args, redirs, callCtx{})
	case *syntax.IfClause:
		for ; c != nil; c = c.Else {
			fr.stmts(c.Cond)
			fr.stmts(c.Then)
		}
	case *syntax.WhileClause:
		fr.stmts(c.Cond)
		fr.stmts(c.Do)
	case *syntax.ForClause:
		switch l := c.Loop.(type) {
		case *syntax.WordIter:
			fr.refName(l.Name.Value, fr.text(l.Name))
			for _, it := range l.Items {
				fr.word(it)
				if integerVars[l.Name.Value] {
					// The loop assigns each item to the variable.
					fr.assignedValue(l.Name.Value, it, it)
				}
			}
		case *syntax.CStyleLoop:
			fr.arith(l.Init, "for ((...))")
			fr.arith(l.Cond, "for ((...))")
			fr.arith(l.Post, "for ((...))")
		}
		fr.stmts(c.Do)
	case *syntax.CaseClause:
		fr.word(c.Word)
		for _, it := range c.Items {
			for _, p := range it.Patterns {
				fr.word(p)
			}
			fr.stmts(it.Stmts)
		}
	case *syntax.Block:
		fr.stmts(c.Stmts)
	case *syntax.Subshell:
		fr.stmts(c.Stmts)
	case *syntax.BinaryCmd:
		fr.stmt(c.X)
		fr.stmt(c.Y)
	case *syntax.FuncDecl:
		// The body is checked when the function is defined: it may run
		// later under any name, in this call or a later one.
		if c.Name != nil {
			fr.funcName(c.Name.Value, c.Name)
		}
		fr.stmt(c.Body)
	case *syntax.ArithmCmd:
		fr.arith(c.X, "((...))")
	case *syntax.TestClause:
		fr.test(c.X)
	case *syntax.DeclClause:
		// declare, local, export, readonly, typeset, nameref: builtins,
		// matched like any other command name.
		fr.decl(c)
	case *syntax.LetClause:
		fr.w.program("let")
		for _, x := range c.Exprs {
			fr.arith(x, "let")
		}
	case *syntax.TimeClause:
		fr.stmt(c.Stmt)
	case *syntax.CoprocClause:
		fr.word(c.Name)
		if c.Name != nil {
			if name, ok := literal(c.Name); ok {
				fr.refName(name, fr.text(c.Name))
			}
		}
		fr.stmt(c.Stmt)
	default:
		fr.w.dynamic(fr.text(c), "unsupported shell construct")
	}
}

// assign checks an assignment (NAME=value, NAME[i]=value, NAME=(...)) and
// the arguments of a declaration. The elements' subscripts of an array
// assignment are keys, not arithmetic, when assoc says the declaration
// makes NAME associative (declare -A).
func (fr *frame) assign(a *syntax.Assign, assoc bool) {
	if a == nil || fr.w.stop {
		return
	}
	if a.Index != nil {
		fr.arith(a.Index, "a subscript")
	}
	fr.word(a.Value)
	if a.Array != nil {
		for _, e := range a.Array.Elems {
			if assoc {
				fr.arithm(e.Index)
			} else if e.Index != nil {
				fr.arith(e.Index, "a subscript")
			}
			fr.word(e.Value)
		}
	}
	if a.Name == nil {
		return
	}
	name := a.Name.Value
	if !fr.refName(name, fr.text(a.Name)) {
		return
	}
	if a.Value != nil && a.Index == nil {
		fr.assignedValue(name, a.Value, a)
	}
	if a.Array != nil && (integerVars[name] || codeVars[name]) {
		// NAME=(...) on one of these is refused like a value that is
		// not a literal: the element that counts is not obvious.
		fr.w.dynamic(fr.text(a), name+" is assigned an array")
	}
}

// prompt inspects the command substitutions of a prompt string.
func (fr *frame) prompt(v, name string) {
	w := fr.w
	if fr.depth+1 > MaxDepth || len(v) > w.budget || bracketNesting(v) > MaxNesting {
		w.report(finding{kind: findLimit, name: clip(v), detail: name + " value too large or nested to inspect"})
		return
	}
	w.budget -= len(v)
	p := parserPool.Get().(*syntax.Parser)
	doc, err := p.Document(strings.NewReader(v))
	parserPool.Put(p)
	if err != nil {
		w.report(finding{kind: findUnparsable, name: clip(v), detail: name + ": " + err.Error()})
		return
	}
	sub := &frame{w: w, src: v, depth: fr.depth + 1}
	sub.word(doc)
}

func (fr *frame) word(wd *syntax.Word) {
	if wd == nil || fr.w.stop {
		return
	}
	for _, p := range wd.Parts {
		fr.wordPart(p)
	}
}

func (fr *frame) wordPart(p syntax.WordPart) {
	if fr.w.stop || !fr.enter() {
		return
	}
	defer fr.leave()
	switch p := p.(type) {
	case *syntax.Lit, *syntax.SglQuoted, *syntax.ExtGlob:
	case *syntax.DblQuoted:
		for _, dp := range p.Parts {
			fr.wordPart(dp)
		}
	case *syntax.CmdSubst:
		fr.stmts(p.Stmts)
	case *syntax.ProcSubst:
		fr.stmts(p.Stmts)
	case *syntax.ArithmExp:
		if p.Bracket {
			fr.arith(p.X, "$[...]")
		} else {
			fr.arith(p.X, "$((...))")
		}
	case *syntax.ParamExp:
		fr.paramExp(p)
	case *syntax.BraceExp:
		for _, e := range p.Elems {
			fr.word(e)
		}
	default:
		fr.w.dynamic(fr.text(p), "unsupported shell construct")
	}
}

func (fr *frame) paramExp(p *syntax.ParamExp) {
	if p.NestedParam != nil {
		fr.wordPart(p.NestedParam)
	}
	if p.Param != nil {
		fr.refName(p.Param.Value, fr.text(p))
	}
	if p.Index != nil {
		if allElements(p.Index) {
			fr.arithm(p.Index)
		} else {
			fr.arith(p.Index, "a subscript")
		}
	}
	if p.Slice != nil {
		fr.arith(p.Slice.Offset, "${name:offset:length}")
		fr.arith(p.Slice.Length, "${name:offset:length}")
	}
	if p.Excl && p.Names == 0 && (p.Index == nil || !allElements(p.Index)) {
		// ${!name} expands the variable whose name is name's value,
		// evaluating a subscript in it.
		fr.w.arithmetic(fr.text(p), "${!name} uses the value of name as a variable reference, and evaluates a subscript in it")
	}
	if p.Exp != nil && p.Param != nil && (p.Exp.Op == syntax.AssignUnset || p.Exp.Op == syntax.AssignUnsetOrNull) {
		// ${name=word} and ${name:=word} assign word to name.
		fr.assignedValue(p.Param.Value, p.Exp.Word, p)
	}
	if p.Repl != nil {
		fr.word(p.Repl.Orig)
		fr.word(p.Repl.With)
	}
	if p.Exp != nil {
		fr.word(p.Exp.Word)
		if p.Exp.Op == syntax.OtherParamOps {
			if op, _ := literal(p.Exp.Word); op == "P" {
				// ${x@P} expands x as a prompt string, running
				// the command substitutions in its value.
				fr.w.dynamic(fr.text(p), "${var@P} runs the command substitutions in a variable's value")
			}
		}
	}
}

func (fr *frame) arithm(x syntax.ArithmExpr) {
	if x == nil || fr.w.stop || !fr.enter() {
		return
	}
	defer fr.leave()
	switch x := x.(type) {
	case *syntax.BinaryArithm:
		fr.arithm(x.X)
		fr.arithm(x.Y)
	case *syntax.UnaryArithm:
		fr.arithm(x.X)
	case *syntax.ParenArithm:
		fr.arithm(x.X)
	case *syntax.FlagsArithm:
		fr.arithm(x.X)
	case *syntax.Word:
		fr.word(x)
	default:
		fr.w.dynamic(fr.text(x), "unsupported arithmetic construct")
	}
}

func (fr *frame) test(x syntax.TestExpr) {
	if x == nil || fr.w.stop || !fr.enter() {
		return
	}
	defer fr.leave()
	switch x := x.(type) {
	case *syntax.BinaryTest:
		fr.test(x.X)
		fr.test(x.Y)
		switch x.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLss, syntax.TsLeq, syntax.TsGtr, syntax.TsGeq:
			// In [[ ]], both sides of -eq ... are arithmetic expressions.
			for _, side := range []syntax.TestExpr{x.X, x.Y} {
				if w, ok := side.(*syntax.Word); !ok || !safeArithWord(w) {
					fr.w.arithmetic(fr.text(side), "[[ "+x.Op.String()+" ]] evaluates "+operandKind(side)+" as an arithmetic expression")
					return
				}
			}
		}
	case *syntax.UnaryTest:
		fr.test(x.X)
		if x.Op == syntax.TsVarSet {
			if w, ok := x.X.(*syntax.Word); ok {
				fr.target(w, "[[ -v ]]", false)
			} else {
				fr.w.arithmetic(fr.text(x.X), "[[ -v ]] takes a variable name")
			}
		}
	case *syntax.ParenTest:
		fr.test(x.X)
	case *syntax.Word:
		fr.word(x)
	default:
		fr.w.dynamic(fr.text(x), "unsupported test construct")
	}
}
