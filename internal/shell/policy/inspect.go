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
)

// finding is one thing the walker reports.
type finding struct {
	kind findingKind
	// name is the program base name (findProgram) or the source text of
	// the unresolvable part.
	name string
	// detail explains a non-program finding.
	detail string
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
	emit   func(finding) bool
	stop   bool
	budget int // bytes left for parsing nested shell strings
	tree   int // current recursion depth over syntax trees
}

var parserPool = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }}

// inspect walks every command that command would run and reports them.
func inspect(command string, emit func(finding) bool) {
	w := &walker{emit: emit, budget: MaxInspectBytes}
	w.source(command, 0, "")
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

func (w *walker) program(name string) {
	if name == "" {
		return // "" is "command not found": nothing runs
	}
	w.report(finding{kind: findProgram, name: name})
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
	if len(src) > w.budget {
		w.report(finding{kind: findLimit, name: clip(src), detail: fmt.Sprintf("more than %d bytes to inspect", MaxInspectBytes)})
		return
	}
	w.budget -= len(src)
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
	}
	fr.command(s.Cmd, s.Redirs)
}

func (fr *frame) command(c syntax.Command, redirs []*syntax.Redirect) {
	switch c := c.(type) {
	case nil:
	case *syntax.CallExpr:
		for _, a := range c.Assigns {
			fr.assign(a)
		}
		for _, a := range c.Args {
			fr.word(a)
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
			for _, it := range l.Items {
				fr.word(it)
			}
		case *syntax.CStyleLoop:
			fr.arithm(l.Init)
			fr.arithm(l.Cond)
			fr.arithm(l.Post)
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
		fr.stmt(c.Body)
	case *syntax.ArithmCmd:
		fr.arithm(c.X)
	case *syntax.TestClause:
		fr.test(c.X)
	case *syntax.DeclClause:
		// declare, local, export, readonly, typeset, nameref: builtins,
		// matched like any other command name.
		fr.w.program(c.Variant.Value)
		for _, a := range c.Args {
			fr.assign(a)
		}
	case *syntax.LetClause:
		fr.w.program("let")
		for _, x := range c.Exprs {
			fr.arithm(x)
		}
	case *syntax.TimeClause:
		fr.stmt(c.Stmt)
	case *syntax.CoprocClause:
		fr.word(c.Name)
		fr.stmt(c.Stmt)
	default:
		fr.w.dynamic(fr.text(c), "unsupported shell construct")
	}
}

// promptVars are expanded with command substitution when a prompt or a
// trace line is printed (PS4 under set -x); PROMPT_COMMAND is run as a
// command.
var promptVars = map[string]bool{"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true}

func (fr *frame) assign(a *syntax.Assign) {
	if a == nil || fr.w.stop {
		return
	}
	fr.arithm(a.Index)
	fr.word(a.Value)
	if a.Array != nil {
		for _, e := range a.Array.Elems {
			fr.arithm(e.Index)
			fr.word(e.Value)
		}
	}
	if a.Name == nil || a.Value == nil {
		return
	}
	name := a.Name.Value
	if !promptVars[name] && name != "PROMPT_COMMAND" {
		return
	}
	v, ok := literal(a.Value)
	if !ok {
		fr.w.dynamic(fr.text(a), name+" is set to a value that is not a literal")
		return
	}
	if name == "PROMPT_COMMAND" {
		fr.w.source(v, fr.depth+1, name)
		return
	}
	fr.prompt(v, name)
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
		fr.arithm(p.X)
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
	fr.arithm(p.Index)
	if p.Slice != nil {
		fr.arithm(p.Slice.Offset)
		fr.arithm(p.Slice.Length)
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
	case *syntax.UnaryTest:
		fr.test(x.X)
	case *syntax.ParenTest:
		fr.test(x.X)
	case *syntax.Word:
		fr.word(x)
	default:
		fr.w.dynamic(fr.text(x), "unsupported test construct")
	}
}
