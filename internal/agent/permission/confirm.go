package permission

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Answer is the user's answer to a confirmation request.
type Answer string

// The answers.
const (
	Deny Answer = "deny"
	// AllowOnce runs this call and records nothing.
	AllowOnce Answer = "allow-once"
	// AllowFile allows the paths shown (exactly those files) from now on.
	AllowFile Answer = "allow-file"
	// AllowWriteDirectory allows writes anywhere under the directories of the paths written.
	AllowWriteDirectory Answer = "allow-write-directory"
	// AllowExecCwd allows the programs shown, run from the directory shown.
	AllowExecCwd Answer = "allow-exec-cwd"
	// AllowExecGlobal allows the programs shown, from any directory.
	AllowExecGlobal Answer = "allow-exec-global"
)

// ParseAnswer checks an answer's name.
func ParseAnswer(s string) (Answer, error) {
	switch a := Answer(s); a {
	case Deny, AllowOnce, AllowFile, AllowWriteDirectory, AllowExecCwd, AllowExecGlobal:
		return a, nil
	}
	return "", fmt.Errorf("unknown answer %q (want deny, allow-once, allow-file, allow-write-directory, allow-exec-cwd or allow-exec-global)", s)
}

// Allowances are what a conversation's answers granted. The zero value grants nothing; the
// JSON form is what the conversation persists.
type Allowances struct {
	// Files are absolute, resolved paths the user allowed (read and write).
	Files []string `json:"files,omitempty"`
	// WriteDirs are absolute, resolved directories under which writes are allowed.
	WriteDirs []string `json:"write_dirs,omitempty"`
	// ExecGlobal are programs allowed from any directory, by path: absolute, with the
	// directory's symbolic links resolved (see Request.Programs); a builtin, function or
	// program PATH does not hold by its name; an MCP tool by its name.
	ExecGlobal []string `json:"exec_global,omitempty"`
	// ExecCwd maps a program, named as in ExecGlobal, to the directories it is allowed to run
	// from.
	ExecCwd map[string][]string `json:"exec_cwd,omitempty"`
}

// UnmarshalJSON reads allowances as the conversation persisted them. Older versions named
// programs by base name ("echo" for any echo, ./bin/echo included): such a name is resolved
// through PATH as it is read, so it now allows the program PATH finds under that name and
// nothing else; a name PATH does not hold stays a name (a builtin, a function, an MCP tool).
func (al *Allowances) UnmarshalJSON(b []byte) error {
	type plain Allowances // without this method
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err //nolint:wrapcheck // the caller says what it was reading
	}
	*al = Allowances(p)
	var global []string
	for _, name := range al.ExecGlobal {
		global = addAll(global, byPath(name))
	}
	al.ExecGlobal = global
	if al.ExecCwd != nil {
		cwd := make(map[string][]string, len(al.ExecCwd))
		for name, dirs := range al.ExecCwd {
			k := byPath(name)
			cwd[k] = addAll(cwd[k], dirs...)
		}
		al.ExecCwd = cwd
	}
	return nil
}

// byPath is the allowance key of a program persisted by name (see UnmarshalJSON).
func byPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	if k, ok := programKey(name, "", false); ok {
		return k
	}
	return name
}

// Call is what a decision looks at: the tool, its decided paths, and for the shell the
// command and the directory it runs in.
type Call struct {
	Tool  string
	Paths []Path
	// Shown are the indexes in Paths of the paths a confirmation request shows.
	Shown []int
	// Shell marks a shell tool; Command is then the command line and Cwd its directory.
	Shell   bool
	Command string
	Cwd     string
	// External marks a tool whose effects no path semantics describe (an MCP server's): in
	// TRUSTED mode it asks unless an exec allowance names the tool itself.
	External bool
}

// Verdict is a decision's outcome.
type Verdict int

// The verdicts.
const (
	Allow Verdict = iota
	Refuse
	Ask
)

// Request is a confirmation request: what the user is shown and may answer.
type Request struct {
	Tool string `json:"tool"`
	// Paths are the paths shown (relative to the workspace when inside it).
	Paths []string `json:"paths,omitempty"`
	// Command is the shell command, whole.
	Command string `json:"command,omitempty"`
	// Cwd is the directory the command runs in.
	Cwd string `json:"cwd,omitempty"`
	// Programs are the programs the command runs that no allowance covers yet, by path
	// (absolute, the directory's symbolic links resolved; a bare name is found through PATH,
	// and one PATH does not hold, a builtin or a function, stays a name): an exec allowance
	// grants exactly these, so an allowance of echo (/usr/bin/echo) does not admit ./bin/echo.
	Programs []string `json:"programs,omitempty"`
	// Dynamic explains what in the command is only known when it runs: a program, or a
	// redirection's path (then only deny and allow-once are offered).
	Dynamic string `json:"dynamic,omitempty"`
	// Options are the answers offered.
	Options []Answer `json:"options"`

	files     []string // resolved paths needing confirmation
	writeDirs []string // directories of the written ones
}

// Decision is the outcome of Decide.
type Decision struct {
	Verdict Verdict
	// Reason says why a call is refused (safe to show to the model).
	Reason string
	// Request is set when Verdict is Ask.
	Request *Request
}

// Decide says whether call runs now, is refused, or needs the user's answer (TRUSTED mode
// only). Its paths have already passed Resolve. A shell command naming a blocked path in its
// text (a redirection, an argument) is refused at every level; in TRUSTED mode its
// redirections are decided like a tool's paths, and its programs by their allowances.
func (c *Checker) Decide(call Call, al *Allowances) Decision {
	if err := c.ToolEnabled(call.Tool, call.Shell || call.External); err != nil {
		return Decision{Verdict: Refuse, Reason: err.Error()}
	}
	var sh shellView
	if call.Shell {
		sh = c.viewShell(call.Tool, call.Command, call.Cwd, c.level == Trusted)
		if sh.refusal != "" {
			return Decision{Verdict: Refuse, Reason: sh.refusal}
		}
	}
	if c.level != Trusted {
		return Decision{Verdict: Allow}
	}
	if al == nil {
		al = &Allowances{}
	}
	req := &Request{Tool: call.Tool}
	for _, i := range call.Shown {
		if i >= 0 && i < len(call.Paths) {
			req.Paths = append(req.Paths, call.Paths[i].Shown())
		}
	}
	for _, p := range append(slices.Clip(call.Paths), sh.paths...) {
		if c.pathAllowed(p, al) {
			continue
		}
		req.files = append(req.files, p.Abs)
		if p.Access == Write {
			req.writeDirs = append(req.writeDirs, filepath.Dir(p.Abs))
		}
		if !slices.Contains(req.Paths, p.Shown()) {
			req.Paths = append(req.Paths, p.Shown())
		}
	}
	if call.Shell {
		req.Command, req.Cwd = call.Command, call.Cwd
		req.Dynamic = strings.Join(sh.dynamic, "; ")
		for _, prog := range sh.programs {
			if !al.execAllowed(prog, call.Cwd) {
				req.Programs = append(req.Programs, prog)
			}
		}
	}
	if call.External && !al.execAllowed(call.Tool, "") {
		req.Programs = append(req.Programs, call.Tool)
	}
	if len(req.files) == 0 && len(req.Programs) == 0 && req.Dynamic == "" {
		return Decision{Verdict: Allow}
	}
	req.Options = []Answer{Deny, AllowOnce}
	if req.Dynamic == "" {
		if len(req.files) > 0 {
			req.Options = append(req.Options, AllowFile)
		}
		if len(req.writeDirs) > 0 {
			req.Options = append(req.Options, AllowWriteDirectory)
		}
		switch {
		case call.External:
			req.Options = append(req.Options, AllowExecGlobal)
		case len(req.Programs) > 0:
			req.Options = append(req.Options, AllowExecCwd, AllowExecGlobal)
		}
	}
	return Decision{Verdict: Ask, Request: req}
}

// pathAllowed: in TRUSTED mode writes inside the workspace and reads inside the workspace or
// the allowed paths need no confirmation; the allowances cover the rest.
func (c *Checker) pathAllowed(p Path, al *Allowances) bool {
	if p.Inside || slices.Contains(al.Files, p.Abs) {
		return true
	}
	if p.Access == Read && withinAny(p.Abs, c.allowed) {
		return true
	}
	return p.Access == Write && withinAny(p.Abs, al.WriteDirs)
}

func (al *Allowances) execAllowed(prog, cwd string) bool {
	return slices.Contains(al.ExecGlobal, prog) || (cwd != "" && slices.Contains(al.ExecCwd[prog], cwd))
}

// Grant applies the user's answer to req: it reports whether the call may run, and records
// what the answer allows from now on. An answer req did not offer is an error. An exec
// allowance grants the programs the request listed, one by one, never the command line as a
// pattern: allowing `git status && rm -rf x` grants git and rm because both were shown, and
// allowing `git status` grants git alone, so a later `git status && rm -rf x` asks about rm.
func (al *Allowances) Grant(req *Request, a Answer) (bool, error) {
	if !slices.Contains(req.Options, a) {
		return false, fmt.Errorf("answer %q is not one of %v", a, req.Options)
	}
	switch a {
	case Deny:
		return false, nil
	case AllowFile:
		al.Files = addAll(al.Files, req.files...)
	case AllowWriteDirectory:
		al.WriteDirs = addAll(al.WriteDirs, req.writeDirs...)
	case AllowExecCwd:
		if al.ExecCwd == nil {
			al.ExecCwd = map[string][]string{}
		}
		for _, p := range req.Programs {
			al.ExecCwd[p] = addAll(al.ExecCwd[p], req.Cwd)
		}
	case AllowExecGlobal:
		al.ExecGlobal = addAll(al.ExecGlobal, req.Programs...)
	}
	return true, nil
}

func addAll(list []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}
