package policy

import (
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// ReadOnly reports whether command is provably read-only, so that no automatic checkpoint is
// needed before it. It is conservative: true only when the command parses, every command it
// would run is on a short allowlist of inspection tools (with their writing options refused),
// and no redirection writes a file other than /dev/null. Anything dynamic (a command name from
// an expansion, an unknown program, a function definition, an assignment to PATH-like
// variables) is false. An empty command is true: it runs nothing.
//
// It judges the text only: a function or alias the session defined earlier under an allowed
// name is not seen. It decides whether to snapshot, not whether to allow.
func ReadOnly(command string) bool {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil {
		return false
	}
	ok := true
	syntax.Walk(f, func(n syntax.Node) bool {
		if !ok {
			return false
		}
		switch n := n.(type) {
		case *syntax.CallExpr:
			if len(n.Args) > 0 && !readOnlyCall(n.Args) {
				ok = false
			}
		case *syntax.Redirect:
			if !readOnlyRedirect(n) {
				ok = false
			}
		case *syntax.Assign:
			if n.Name != nil && roPoisonVar(n.Name.Value) {
				ok = false
			}
		case *syntax.FuncDecl, *syntax.CoprocClause, *syntax.TestDecl:
			ok = false
		case *syntax.DeclClause:
			// declare/local/export/readonly/typeset only set variables; the assignments are
			// checked above. A name without "=" (export PATH) is checked here.
			for _, a := range n.Args {
				if a.Name != nil && roPoisonVar(a.Name.Value) {
					ok = false
				}
			}
		}
		return ok
	})
	return ok
}

// roPoisonVar reports whether assigning name could make later "read-only" commands run something
// else (PATH, loader and shell startup variables, prompts evaluated with set -x, git's).
func roPoisonVar(name string) bool {
	switch name {
	case "PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND",
		"PS0", "PS1", "PS2", "PS3", "PS4", "PAGER", "EDITOR", "VISUAL", "HISTFILE", "CDPATH":
		return true
	}
	return strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "GIT_") || strings.HasPrefix(name, "BASH_FUNC_")
}

// readOnlyRedirect allows reading redirections, duplications of descriptors, and writing to
// /dev/null only.
func readOnlyRedirect(r *syntax.Redirect) bool {
	target, static := roWordValue(r.Word)
	switch r.Op {
	case syntax.RdrIn, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return true
	case syntax.DplIn:
		return static
	case syntax.DplOut:
		// 2>&1, >&2, 3>&-: descriptors. `>& file` would write a file.
		if !static {
			return false
		}
		if target == "-" || target == "/dev/null" {
			return true
		}
		_, err := strconv.Atoi(strings.TrimSuffix(target, "-"))
		return err == nil
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.RdrAll, syntax.AppAll:
		return static && target == "/dev/null"
	}
	return false // <> opens for writing; anything else is unknown
}

// roWordValue is the value of w after quote removal, and whether it is known without running
// anything: no expansion, substitution, glob, brace or tilde expansion.
func roWordValue(w *syntax.Word) (string, bool) {
	if w != nil && len(w.Parts) > 0 {
		if l, ok := w.Parts[0].(*syntax.Lit); ok && strings.HasPrefix(l.Value, "~") {
			return "", false // tilde expansion
		}
	}
	return literal(w)
}

// roArg is one argument of a command: its value and whether the value is static.
type roArg struct {
	v      string
	static bool
}

// readOnlyAny are programs that cannot write files whatever their arguments, so arguments from
// expansions are fine.
var readOnlyAny = map[string]bool{
	"ls": true, "cat": true, "head": true, "tail": true, "wc": true, "pwd": true, "echo": true,
	"printf": true, "true": true, "false": true, ":": true, "test": true, "[": true, "cd": true,
	"grep": true, "egrep": true, "fgrep": true, "stat": true, "du": true, "df": true,
	"whoami": true, "id": true, "uname": true, "nproc": true, "printenv": true, "sleep": true,
	"cut": true, "tr": true, "nl": true, "tac": true, "rev": true, "basename": true,
	"dirname": true, "realpath": true, "readlink": true, "which": true, "type": true,
	"cmp": true, "diff": true, "md5sum": true, "sha1sum": true, "sha256sum": true,
	"sha512sum": true, "uptime": true, "free": true, "groups": true, "tty": true, "locale": true,
}

// readOnlyChecked are programs that are read-only unless given particular options; their
// arguments must be static and pass the check.
var readOnlyChecked = map[string]func(args []string) bool{
	"find":     findReadOnly,
	"sort":     sortReadOnly,
	"uniq":     uniqReadOnly,
	"rg":       func(a []string) bool { return !roAnyPrefix(a, "--pre") },
	"file":     func(a []string) bool { return !roAnyPrefix(a, "--compile") && !roShortFlag(a, 'C') },
	"date":     dateReadOnly,
	"hostname": hostnameReadOnly,
	"env":      func(a []string) bool { return len(a) == 0 },
	"command":  func(a []string) bool { return len(a) >= 2 && (a[0] == "-v" || a[0] == "-V") },
	"git":      gitReadOnly,
}

func readOnlyCall(words []*syntax.Word) bool {
	name, static := roWordValue(words[0])
	if !static || name == "" || strings.Contains(name, "/") {
		return false
	}
	args := make([]roArg, 0, len(words)-1)
	for _, w := range words[1:] {
		v, s := roWordValue(w)
		args = append(args, roArg{v, s})
	}
	if readOnlyAny[name] {
		return true
	}
	check, ok := readOnlyChecked[name]
	if !ok {
		return false
	}
	vals := make([]string, len(args))
	for i, a := range args {
		if !a.static {
			return false
		}
		vals[i] = a.v
	}
	return check(vals)
}

func roAnyPrefix(args []string, prefixes ...string) bool {
	for _, a := range args {
		for _, p := range prefixes {
			if strings.HasPrefix(a, p) {
				return true
			}
		}
	}
	return false
}

// roShortFlag reports whether a cluster of short options (-abc) holds c.
func roShortFlag(args []string, c byte) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(a[1:], c) >= 0 {
			return true
		}
	}
	return false
}

func findReadOnly(args []string) bool {
	for _, a := range args {
		switch a {
		case "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls":
			return false
		}
	}
	return true
}

func sortReadOnly(args []string) bool {
	return !roAnyPrefix(args, "--output", "--compress-program") && !roShortFlag(args, 'o')
}

// uniqReadOnly refuses a second operand, which uniq writes to.
func uniqReadOnly(args []string) bool {
	operands := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-f" || a == "-s" || a == "-w":
			i++
		case a == "--":
			operands += len(args) - i - 1
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
		default:
			operands++
		}
	}
	return operands <= 1
}

// dateReadOnly refuses setting the clock (-s, --set, or an MMDDhhmm operand).
func dateReadOnly(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "+"):
		case a == "-d" || a == "--date" || a == "-r" || a == "--reference":
			i++
		case strings.HasPrefix(a, "--date=") || strings.HasPrefix(a, "--reference=") ||
			strings.HasPrefix(a, "--iso-8601") || strings.HasPrefix(a, "--rfc-") ||
			a == "--utc" || a == "--universal" || a == "-u" || a == "-R" || strings.HasPrefix(a, "-I"):
		default:
			return false
		}
	}
	return true
}

func hostnameReadOnly(args []string) bool {
	for _, a := range args {
		switch a {
		case "-f", "-s", "-i", "-I", "-d", "-A", "-a", "--fqdn", "--long", "--short", "--ip-address",
			"--all-ip-addresses", "--domain", "--all-fqdns", "--alias":
		default:
			return false
		}
	}
	return true
}

// gitReadOnly allows git subcommands that only read (status, log, diff, show, ...) and the
// listing forms of branch, tag, remote, config, stash, worktree and reflog. Global options other
// than -C and --no-pager are refused (-c can make git run programs).
func gitReadOnly(args []string) bool {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "-C" {
			i++
			continue
		}
		if a == "--no-pager" || a == "-P" || a == "--no-optional-locks" {
			continue
		}
		if strings.HasPrefix(a, "-") {
			return false
		}
		break
	}
	if i >= len(args) {
		return false
	}
	sub, rest := args[i], args[i+1:]
	if roAnyPrefix(rest, "--output", "--ext-diff") {
		return false
	}
	switch sub {
	case "status", "log", "diff", "show", "rev-parse", "ls-files", "ls-tree", "cat-file", "blame",
		"describe", "rev-list", "shortlog", "version", "merge-base", "show-ref", "diff-tree",
		"diff-index", "diff-files", "whatchanged", "count-objects", "for-each-ref", "check-ignore",
		"name-rev", "show-branch", "var":
		return true
	case "grep":
		return !roAnyPrefix(rest, "-O", "--open-files-in-pager")
	case "branch":
		return roListingArgs(rest, []string{"-a", "--all", "-r", "--remotes", "-v", "-vv", "--verbose",
			"--show-current", "--no-color", "--column", "--no-column", "-i", "--ignore-case"},
			[]string{"--contains", "--no-contains", "--merged", "--no-merged", "--points-at", "--sort", "--format", "--color", "--abbrev"})
	case "tag":
		return roListingArgs(rest, []string{"-n", "--no-color", "--column", "--no-column", "-i", "--ignore-case"},
			[]string{"--contains", "--no-contains", "--merged", "--no-merged", "--points-at", "--sort", "--format", "--color"})
	case "remote":
		return len(rest) == 0 || (len(rest) == 1 && (rest[0] == "-v" || rest[0] == "--verbose")) ||
			(len(rest) >= 1 && rest[0] == "get-url")
	case "config":
		if len(rest) > 0 && (rest[0] == "get" || rest[0] == "list") {
			return true
		}
		reading := false
		for _, a := range rest {
			switch a {
			case "--get", "--get-all", "--get-regexp", "--get-urlmatch", "-l", "--list":
				reading = true
			case "--add", "--unset", "--unset-all", "--replace-all", "--edit", "-e", "--rename-section", "--remove-section":
				return false
			}
		}
		return reading
	case "stash":
		return len(rest) > 0 && (rest[0] == "list" || rest[0] == "show")
	case "worktree":
		return len(rest) > 0 && rest[0] == "list"
	case "reflog":
		return len(rest) == 0 || rest[0] == "show" || rest[0] == "exists"
	}
	return false
}

// roListingArgs accepts the listing forms of git branch and git tag: known flags, flags taking a
// value, and patterns only after -l/--list.
func roListingArgs(args, flags, valued []string) bool {
	list := false
	patterns := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(a, "=")
		switch {
		case a == "-l" || a == "--list":
			list = true
		case slices.Contains(flags, a) || (strings.HasPrefix(a, "-n") && slices.Contains(flags, "-n")):
		case slices.Contains(valued, name):
			if !hasValue && name != "--color" && name != "--abbrev" {
				i++
			}
		case strings.HasPrefix(a, "-"):
			return false
		default:
			patterns++
		}
	}
	return patterns == 0 || list
}
