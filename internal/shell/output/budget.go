package output

import (
	"fmt"
	"regexp"

	"github.com/nexus-run/nexus/internal/shell"
)

// Limits on a budget's fields. They keep a collector's memory bounded whatever an agent asks
// for: a collector holds O(max_chars) characters plus O(context) lines.
const (
	// MaxMaxChars is the largest max_chars a budget may ask for, per stream.
	MaxMaxChars = 1_000_000
	// MaxLines is the largest lines a budget may ask for (a tail window of that many lines is
	// held as counts, 4 bytes a line).
	MaxLines = 1_000_000
	// MaxContext is the largest grep context.
	MaxContext = 100
	// MaxPatternLen caps the length of a grep pattern in bytes.
	MaxPatternLen = 4096
)

// ValidateBudget checks a budget's fields: keep is one of all, head, tail, head_tail (or empty
// for the default); lines between 0 and MaxLines, and >= 1 when keep is head, tail or head_tail; max_chars between
// 0 (the default, shell.DefaultMaxChars) and MaxMaxChars; grep.context between 0 and MaxContext;
// grep.pattern a valid RE2 expression (an empty pattern means no grep). Errors say what to fix,
// naming the field; the caller names the argument (budget, output_budget).
func ValidateBudget(b shell.Budget) error {
	_, err := compileBudget(b)
	return err
}

// compileBudget validates b and returns its compiled grep (nil without one).
func compileBudget(b shell.Budget) (*regexp.Regexp, error) {
	switch b.Keep {
	case "", shell.KeepAll, shell.KeepHead, shell.KeepTail, shell.KeepHeadTail:
	default:
		return nil, fmt.Errorf("keep %q is not a keep mode; use one of %q, %q, %q, %q",
			b.Keep, shell.KeepAll, shell.KeepHead, shell.KeepTail, shell.KeepHeadTail)
	}
	if b.Lines < 0 || b.Lines > MaxLines {
		return nil, fmt.Errorf("lines is %d; it must be between 0 and %d (for everything, use keep \"all\")", b.Lines, MaxLines)
	}
	if b.Lines == 0 && (b.Keep == shell.KeepHead || b.Keep == shell.KeepTail || b.Keep == shell.KeepHeadTail) {
		return nil, fmt.Errorf("keep %q needs lines >= 1 (how many lines to keep)", b.Keep)
	}
	if b.MaxChars < 0 || b.MaxChars > MaxMaxChars {
		return nil, fmt.Errorf("max_chars is %d; it must be between 1 and %d (0 or absent means %d)",
			b.MaxChars, MaxMaxChars, shell.DefaultMaxChars)
	}
	if b.Grep == nil || b.Grep.Pattern == "" {
		return nil, nil
	}
	if b.Grep.Context < 0 || b.Grep.Context > MaxContext {
		return nil, fmt.Errorf("grep.context is %d; it must be between 0 and %d", b.Grep.Context, MaxContext)
	}
	if len(b.Grep.Pattern) > MaxPatternLen {
		return nil, fmt.Errorf("grep.pattern is %d bytes long; it must be at most %d", len(b.Grep.Pattern), MaxPatternLen)
	}
	re, err := regexp.Compile(b.Grep.Pattern)
	if err != nil {
		return nil, fmt.Errorf("grep.pattern is not a valid RE2 regular expression (%w); fix the pattern "+
			"(RE2 syntax: no backreferences or lookaround; escape literal metacharacters such as ( [ . * with \\)", err)
	}
	return re, nil
}

// MergeBudget returns the budget for one call: the session's default with every field the call
// sets overriding it. A call's grep replaces the default's grep as a whole (a grep with an empty
// pattern turns the default's grep off); keep, lines and max_chars override when non-zero.
// Either argument may be nil.
func MergeBudget(sessionDefault, perCall *shell.Budget) shell.Budget {
	var out shell.Budget
	if sessionDefault != nil {
		out = *sessionDefault
		if out.Grep != nil {
			g := *out.Grep
			out.Grep = &g
		}
	}
	if perCall == nil {
		return out
	}
	if perCall.Grep != nil {
		g := *perCall.Grep
		out.Grep = &g
	}
	if perCall.Keep != "" {
		out.Keep = perCall.Keep
	}
	if perCall.Lines != 0 {
		out.Lines = perCall.Lines
	}
	if perCall.MaxChars != 0 {
		out.MaxChars = perCall.MaxChars
	}
	return out
}
