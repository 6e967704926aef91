package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// FileRef is a file a command's text names: the target of a redirection (>, >>, <, <>, &>,
// >|, >&FILE, and so $(<FILE)), or an argument word of a command, which may or may not be a
// path (Inspect cannot know what a program does with its arguments).
type FileRef struct {
	// Path is the word after quote removal, when Static.
	Path string
	// Static reports that the shell expands nothing in the word (no parameter, command or
	// process substitution, arithmetic, glob, brace or tilde expansion): Path is the file.
	Static bool
	// Prefix is the word's leading text that no expansion changes, when not Static: a tilde,
	// if the word starts with one, is kept as "~" for the caller to judge.
	Prefix string
	// Text is the word as written (clipped), for messages.
	Text string
	// Redirect marks a redirection's target; otherwise the word is a command's argument.
	Redirect bool
	// Write marks a redirection that opens the file for writing (every one but < and <&).
	Write bool
}

// ProgramRef is a program a command runs, by the name the command gives it.
type ProgramRef struct {
	// Name is the name as written, after quote removal: "echo", "./bin/echo", "/usr/bin/env".
	Name string
	// Base is its base name, what the allow and deny lists match.
	Base string
}

// Report is what a command's text shows it would run and which files it names.
type Report struct {
	// Programs are the programs it runs, in order of first appearance, without duplicates.
	Programs []ProgramRef
	// Redirects are the files its redirections open, in order (here-documents, here-strings,
	// descriptor copies and closes, and process substitutions open none).
	Redirects []FileRef
	// Args are the argument words of its simple commands, in order.
	Args []FileRef
	// ChangesDir reports that it runs cd, pushd or popd: its relative paths may be relative
	// to a directory the text does not fix.
	ChangesDir bool
}

// Inspect walks command like Check with lists would (every nested shell string, substitution
// and wrapper) and reports the programs it runs and the files its text names. When part of
// the command cannot be resolved statically, or it does not parse, the error is the
// *Violation a policy with lists would return; what was found is still reported.
func Inspect(command string) (Report, error) {
	var rep Report
	seen := map[string]bool{}
	var first *Violation
	inspect(command, func(f finding) bool {
		switch f.kind {
		case findProgram:
			if !seen[f.written] {
				seen[f.written] = true
				rep.Programs = append(rep.Programs, ProgramRef{Name: f.written, Base: f.name})
			}
			switch f.name {
			case "cd", "pushd", "popd":
				rep.ChangesDir = true
			}
		case findFile:
			if f.file.Redirect {
				rep.Redirects = append(rep.Redirects, *f.file)
			} else {
				rep.Args = append(rep.Args, *f.file)
			}
		default:
			if first == nil {
				first = (&Policy{}).judge(f)
				first.Command = command
			}
		}
		return true
	})
	if first != nil {
		return rep, first
	}
	return rep, nil
}

// redirectFile reports the file a redirection opens, if it opens one.
func (fr *frame) redirectFile(r *syntax.Redirect) {
	if r.Word == nil {
		return
	}
	write := true
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return
	case syntax.RdrIn:
		write = false
	case syntax.DplIn, syntax.DplOut:
		// N>&M, N>&M- and N>&- copy, move or close a descriptor; >&WORD with any other
		// word opens a file (bash's >&FILE is &>FILE).
		if s, ok := literal(r.Word); ok && (s == "-" || isNumber(strings.TrimSuffix(s, "-")) && !strings.HasPrefix(s, "-")) {
			return
		}
		write = r.Op == syntax.DplOut
	}
	if len(r.Word.Parts) == 1 {
		if _, ok := r.Word.Parts[0].(*syntax.ProcSubst); ok {
			// < <(cmd) opens /dev/fd/N, a pipe; cmd itself is walked like any command.
			return
		}
	}
	ref := fr.fileRef(r.Word)
	ref.Redirect, ref.Write = true, write
	fr.w.report(finding{kind: findFile, file: &ref})
}

// argFile reports a command's argument word.
func (fr *frame) argFile(wd *syntax.Word) {
	ref := fr.fileRef(wd)
	if !ref.Static && ref.Prefix == "" {
		return // nothing of it is known
	}
	fr.w.report(finding{kind: findFile, file: &ref})
}

func (fr *frame) fileRef(wd *syntax.Word) FileRef {
	ref := FileRef{Text: fr.text(wd)}
	if s, ok := literal(wd); ok && !tilde(wd) {
		ref.Path, ref.Static = s, true
		return ref
	}
	ref.Prefix = staticPrefix(wd)
	return ref
}

// tilde reports whether the shell would expand a tilde at the start of wd.
func tilde(wd *syntax.Word) bool {
	if len(wd.Parts) == 0 {
		return false
	}
	l, ok := wd.Parts[0].(*syntax.Lit)
	return ok && strings.HasPrefix(l.Value, "~")
}

// staticPrefix is the text at the start of wd that no expansion changes: quote removal
// applied, up to the first parameter, substitution, glob or brace character.
func staticPrefix(wd *syntax.Word) string {
	var b strings.Builder
	for _, part := range wd.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			for i := 0; i < len(p.Value); i++ {
				switch c := p.Value[i]; c {
				case '*', '?', '[', '{', '\\':
					return b.String()
				default:
					b.WriteByte(c)
				}
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				return b.String()
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return b.String()
			}
			for _, dp := range p.Parts {
				l, ok := dp.(*syntax.Lit)
				if !ok {
					return b.String()
				}
				b.WriteString(unescapeDouble(l.Value))
			}
		default:
			return b.String()
		}
	}
	return b.String()
}
