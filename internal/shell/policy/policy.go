package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// MaxOperatorFileBytes bounds the size of an operator policy file.
const MaxOperatorFileBytes = 1 << 20

// maxNameBytes bounds one program name.
const maxNameBytes = 255

// Operator is the operator's policy, set by whoever runs nexus (a file the
// agent cannot edit), never by tool arguments. Its deny list and patterns
// always win; its allow list, when set, bounds every session.
type Operator struct {
	Allow        []string
	Deny         []string
	DenyPatterns []*regexp.Regexp
}

// operatorFile is the JSON form of an operator policy file.
type operatorFile struct {
	Allow        []string `json:"allow"`
	Deny         []string `json:"deny"`
	DenyPatterns []string `json:"deny_patterns"`
}

// LoadOperatorFile reads an operator policy file: a JSON object with the
// optional keys "allow" and "deny" (program names) and "deny_patterns"
// (regular expressions, RE2 syntax, matched against the whole command).
// Unknown keys, trailing data, bad names and bad regexes are errors.
func LoadOperatorFile(path string) (Operator, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the path is the operator's configuration, never a tool argument
	if err != nil {
		return Operator{}, fmt.Errorf("policy file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxOperatorFileBytes+1))
	if err != nil {
		return Operator{}, fmt.Errorf("policy file %s: %w", path, err)
	}
	if len(data) > MaxOperatorFileBytes {
		return Operator{}, fmt.Errorf("policy file %s: larger than %d bytes", path, MaxOperatorFileBytes)
	}
	op, err := ParseOperator(data)
	if err != nil {
		return Operator{}, fmt.Errorf("policy file %s: %w", path, err)
	}
	return op, nil
}

// ParseOperator decodes the JSON of an operator policy file (see
// LoadOperatorFile).
func ParseOperator(data []byte) (Operator, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Operator{}, errors.New(`empty; write {} for a policy without rules`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw *operatorFile
	if err := dec.Decode(&raw); err != nil {
		return Operator{}, fmt.Errorf("invalid JSON (keys: allow, deny, deny_patterns): %w", err)
	}
	if raw == nil {
		return Operator{}, errors.New("must be a JSON object, not null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Operator{}, errors.New("unexpected data after the JSON object")
	}
	op := Operator{Allow: raw.Allow, Deny: raw.Deny}
	for i, src := range raw.DenyPatterns {
		if src == "" {
			return Operator{}, fmt.Errorf("deny_patterns[%d]: empty pattern would match every command", i)
		}
		re, err := regexp.Compile(src)
		if err != nil {
			return Operator{}, fmt.Errorf("deny_patterns[%d]: %w", i, err)
		}
		op.DenyPatterns = append(op.DenyPatterns, re)
	}
	if _, _, err := normalize("allow", op.Allow); err != nil {
		return Operator{}, err
	}
	if _, _, err := normalize("deny", op.Deny); err != nil {
		return Operator{}, err
	}
	return op, nil
}

// Policy is a session's allow and deny lists of program names combined with
// the operator's policy. It is immutable and safe for concurrent use; a nil
// *Policy allows everything.
type Policy struct {
	allow, deny        []string // session lists, as given (deduplicated)
	opAllow            []string
	allowSet, denySet  map[string]string // lower-cased name -> entry as given
	opAllowSet, opDeny map[string]string
	patterns           []*regexp.Regexp
	lists              bool // any allow or deny list: commands are parsed
}

// New validates a session's allow and deny lists (agent-supplied, untrusted)
// and combines them with the operator's policy. Names are program base names
// ("rm", not "/bin/rm"); they match case-insensitively. A program must pass
// every list: the operator's deny and the session's deny refuse it, and
// each allow list that is set (the operator's, the session's) must contain
// it. So a session's allow list can never re-enable what the operator
// denies or leaves out.
func New(allow, deny []string, op Operator) (*Policy, error) {
	p := &Policy{}
	var err error
	if p.allow, p.allowSet, err = normalize("allow", allow); err != nil {
		return nil, err
	}
	if p.deny, p.denySet, err = normalize("deny", deny); err != nil {
		return nil, err
	}
	if p.opAllow, p.opAllowSet, err = normalize("operator allow", op.Allow); err != nil {
		return nil, err
	}
	if _, p.opDeny, err = normalize("operator deny", op.Deny); err != nil {
		return nil, err
	}
	for i, re := range op.DenyPatterns {
		if re == nil {
			return nil, fmt.Errorf("operator deny_patterns[%d]: nil pattern", i)
		}
		p.patterns = append(p.patterns, re)
	}
	p.lists = len(p.allowSet)+len(p.denySet)+len(p.opAllowSet)+len(p.opDeny) > 0
	return p, nil
}

// normalize validates a list of program names and returns it deduplicated
// (first spelling kept) with the set of lower-cased names.
func normalize(field string, names []string) ([]string, map[string]string, error) {
	if len(names) == 0 {
		return nil, nil, nil
	}
	list := make([]string, 0, len(names))
	set := make(map[string]string, len(names))
	for i, n := range names {
		if err := validName(n); err != nil {
			return nil, nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		k := strings.ToLower(n)
		if _, dup := set[k]; dup {
			continue
		}
		set[k] = n
		list = append(list, n)
	}
	return list, set, nil
}

func validName(n string) error {
	switch {
	case n == "":
		return errors.New("empty program name")
	case len(n) > maxNameBytes:
		return fmt.Errorf("program name longer than %d bytes", maxNameBytes)
	case strings.Contains(n, "/"):
		return fmt.Errorf("%q is a path: give the program's base name (%q), which matches it under any directory", n, baseName(n))
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("program name %q contains a space or a control character", n)
		}
	}
	return nil
}

// Allow returns the session's allow list (nil when unset).
func (p *Policy) Allow() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.allow...)
}

// Deny returns the session's deny list (nil when unset).
func (p *Policy) Deny() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.deny...)
}

// Empty reports whether the policy allows every command without looking at
// it: no list and no pattern.
func (p *Policy) Empty() bool {
	return p == nil || (!p.lists && len(p.patterns) == 0)
}

// Violation is a command refused by a policy. Error() names the rule and
// says what to do; Command holds the whole command (redact it before
// logging).
type Violation struct {
	// Rule is the rule that refused the command: "deny: rm",
	// "operator deny: rm", "allow list: curl not in [ls cat]",
	// "operator allow list: ...", "deny_patterns[0]: curl .*\| *sh",
	// "dynamic command", "arithmetic on data", "reserved name",
	// "unparsable command" or "uninspectable command".
	Rule string
	// Program is the program refused (its base name), or for the last
	// five rules the text that could not be resolved. Empty for a
	// deny pattern, which matches the whole command.
	Program string
	// Detail explains a refusal that is not about a named program.
	Detail string
	// Command is the command that was refused.
	Command string
}

// The rule names of the refusals that are not about a named program.
const (
	RuleDynamic = "dynamic command"
	// RuleArithmetic refuses a word bash would evaluate arithmetically
	// (or as a variable reference with a subscript) whose value the
	// command text does not show: bash runs the command substitutions
	// of a subscript found in such a value.
	RuleArithmetic    = "arithmetic on data"
	RuleReserved      = "reserved name"
	RuleUnparsable    = "unparsable command"
	RuleUninspectable = "uninspectable command"
)

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "blocked by policy rule %q", v.Rule)
	switch v.Rule {
	case RuleDynamic:
		fmt.Fprintf(&b, ": %s: %s; with an allow or deny list, every program a command runs must be visible in the command itself (write program names and shell strings literally)", v.Program, v.Detail)
	case RuleArithmetic:
		fmt.Fprintf(&b, ": %s: %s; with an allow or deny list, arithmetic, subscripts and the names given to read, printf -v, declare, unset, test -v ... may only be literals (integers, $#, $?, ${#name}), because bash evaluates a variable's value there and runs the command substitutions of a subscript in it", v.Program, v.Detail)
	case RuleReserved:
		fmt.Fprintf(&b, ": %s: %s; names starting with %s, the session's descriptors and the builtins its command loop uses belong to the session", v.Program, v.Detail, ReservedPrefix)
	case RuleUnparsable:
		fmt.Fprintf(&b, ": %s; the command must parse to be checked against the allow/deny lists", v.Detail)
	case RuleUninspectable:
		fmt.Fprintf(&b, ": %s; split the command into smaller ones", v.Detail)
	default:
		if v.Program != "" {
			fmt.Fprintf(&b, ": the command would run %s", v.Program)
		} else {
			b.WriteString(": the operator's policy forbids this command")
		}
		b.WriteString("; this session may not run it, try another way")
	}
	return b.String()
}

// Check returns nil when command may run, or a *Violation naming the first
// rule it breaks. Operator deny patterns are matched against the raw
// command first. With no allow or deny list the command is not parsed (a
// syntax error is then left for the shell to report). With lists, the
// command is parsed and every program it would run is checked (see the
// package documentation); a command whose programs cannot all be known
// statically (a dynamic command name, eval of a variable, a script piped
// into a shell), does not parse, or exceeds the inspection limits is
// refused.
func (p *Policy) Check(command string) error {
	if p == nil {
		return nil
	}
	for i, re := range p.patterns {
		if re.MatchString(command) {
			return &Violation{Rule: fmt.Sprintf("deny_patterns[%d]: %s", i, re), Command: command}
		}
	}
	if !p.lists {
		return nil
	}
	var v *Violation
	inspect(command, func(f finding) bool {
		v = p.judge(f)
		return v == nil
	})
	if v != nil {
		v.Command = command
		return v
	}
	return nil
}

// judge applies the lists to one finding.
func (p *Policy) judge(f finding) *Violation {
	switch f.kind {
	case findDynamic:
		return &Violation{Rule: RuleDynamic, Program: f.name, Detail: f.detail}
	case findUnparsable:
		return &Violation{Rule: RuleUnparsable, Program: f.name, Detail: f.detail}
	case findLimit:
		return &Violation{Rule: RuleUninspectable, Program: f.name, Detail: f.detail}
	case findArithmetic:
		return &Violation{Rule: RuleArithmetic, Program: f.name, Detail: f.detail}
	case findReserved:
		return &Violation{Rule: RuleReserved, Program: f.name, Detail: f.detail}
	case findFile:
		return nil // files are Inspect's report, not a rule of the lists
	}
	k := strings.ToLower(f.name)
	if entry, ok := p.opDeny[k]; ok {
		return &Violation{Rule: "operator deny: " + entry, Program: f.name}
	}
	if entry, ok := p.denySet[k]; ok {
		return &Violation{Rule: "deny: " + entry, Program: f.name}
	}
	if _, ok := p.opAllowSet[k]; p.opAllowSet != nil && !ok {
		return &Violation{Rule: fmt.Sprintf("operator allow list: %s not in %v", f.name, p.opAllow), Program: f.name}
	}
	if _, ok := p.allowSet[k]; p.allowSet != nil && !ok {
		return &Violation{Rule: fmt.Sprintf("allow list: %s not in %v", f.name, p.allow), Program: f.name}
	}
	return nil
}

// Programs lists, in order of first appearance and without duplicates, the
// base names of every program command would run, as the lists see them
// (for audit and tests). When part of the command cannot be resolved
// statically, or the command does not parse, the error is the *Violation a
// policy with lists would return; the names found are still returned.
func Programs(command string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	var first *Violation
	inspect(command, func(f finding) bool {
		if f.kind == findProgram {
			if !seen[f.name] {
				seen[f.name] = true
				names = append(names, f.name)
			}
			return true
		}
		if first == nil && f.kind != findFile {
			first = (&Policy{}).judge(f)
			first.Command = command
		}
		return true
	})
	if first != nil {
		return names, first
	}
	return names, nil
}
