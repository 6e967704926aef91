package acpagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/abi"
)

// The session modes: nexus's permission levels (docs/ai-chat.md, Levels).
var modes = []acp.SessionMode{
	{Id: "trusted", Name: "Trusted", Description: acp.Ptr("asks before commands, writes outside the workspace and reads outside it")},
	{Id: "sandboxed", Name: "Sandboxed", Description: acp.Ptr("the workspace only; no bash, no MCP tools; never asks")},
	{Id: "yolo", Name: "YOLO", Description: acp.Ptr("runs everything not blocked without asking")},
}

func modeState(level string) *acp.SessionModeState {
	return &acp.SessionModeState{AvailableModes: modes, CurrentModeId: acp.SessionModeId(level)}
}

func validMode(id string) bool {
	for _, m := range modes {
		if string(m.Id) == id {
			return true
		}
	}
	return false
}

// toolKind is the ACP kind of a nexus tool (the icon and treatment an editor gives the call).
func toolKind(name string) acp.ToolKind {
	switch name {
	case "read_file", "list_dir":
		return acp.ToolKindRead
	case "write_file", "edit_file", "copy_file":
		return acp.ToolKindEdit
	case "glob", "grep":
		return acp.ToolKindSearch
	case "bash":
		return acp.ToolKindExecute
	case "memory_append":
		return acp.ToolKindEdit
	}
	if strings.HasPrefix(name, "mcp_") && strings.Contains(strings.ToLower(name), "fetch") {
		return acp.ToolKindFetch
	}
	return acp.ToolKindOther
}

// toolArgs are the arguments of nexus's tools that the mapping reads.
type toolArgs struct {
	Path        string `json:"path"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Command     string `json:"command"`
	Pattern     string `json:"pattern"`
	Offset      int    `json:"offset"`
	Content     string `json:"content"`
	OldString   string `json:"old_string"`
	NewString   string `json:"new_string"`
}

func parseArgs(raw json.RawMessage) toolArgs {
	var a toolArgs
	_ = json.Unmarshal(raw, &a) // arguments that are not an object read as none
	return a
}

// toolTitle is what an editor shows for a call: the tool and what it acts on.
func toolTitle(name string, a toolArgs) string {
	what := ""
	switch name {
	case "bash":
		what = a.Command
	case "copy_file":
		what = a.Source + " → " + a.Destination
	case "glob", "grep":
		what = a.Pattern
		if a.Path != "" {
			what += " in " + a.Path
		}
	default:
		what = a.Path
	}
	what = strings.ReplaceAll(what, "\n", " ")
	if len(what) > 120 {
		what = what[:120] + "…"
	}
	if what == "" {
		return name
	}
	return name + ": " + what
}

// abs makes a tool's path absolute against the workspace, as the tools do, so an editor can
// open it.
func abs(workspace, p string) string {
	if p == "" || filepath.IsAbs(p) || workspace == "" {
		return p
	}
	return filepath.Join(workspace, p)
}

// toolLocations are the paths a call touches (ACP's "follow along").
func toolLocations(name string, a toolArgs, workspace string) []acp.ToolCallLocation {
	var out []acp.ToolCallLocation
	add := func(p string, line int) {
		if p == "" {
			return
		}
		l := acp.ToolCallLocation{Path: abs(workspace, p)}
		if line > 0 {
			l.Line = acp.Ptr(line)
		}
		out = append(out, l)
	}
	switch name {
	case "copy_file":
		add(a.Source, 0)
		add(a.Destination, 0)
	case "read_file":
		add(a.Path, a.Offset)
	case "bash":
	default:
		add(a.Path, 0)
	}
	return out
}

// permissionOption is how one of nexus's confirmation answers is offered to the editor: the
// option id is the answer itself, so `nexus ai confirm`'s choices and the editor's are the same.
func permissionOption(answer string, c abi.AIConfirmation) (acp.PermissionOption, bool) {
	o := acp.PermissionOption{OptionId: acp.PermissionOptionId(answer)}
	switch answer {
	case "deny":
		o.Kind, o.Name = acp.PermissionOptionKindRejectOnce, "Reject"
	case "allow-once":
		o.Kind, o.Name = acp.PermissionOptionKindAllowOnce, "Allow once"
	case "allow-file":
		o.Kind, o.Name = acp.PermissionOptionKindAllowAlways, "Always allow these files"
	case "allow-write-directory":
		o.Kind, o.Name = acp.PermissionOptionKindAllowAlways, "Always allow writes in these directories"
	case "allow-exec-cwd":
		o.Kind, o.Name = acp.PermissionOptionKindAllowAlways, "Always allow "+programs(c)+" in "+c.Cwd
	case "allow-exec-global":
		o.Kind, o.Name = acp.PermissionOptionKindAllowAlways, "Always allow "+programs(c)
		if strings.HasPrefix(c.Tool, "mcp_") {
			o.Name = "Always allow " + c.Tool
		}
	default:
		return o, false
	}
	return o, true
}

func programs(c abi.AIConfirmation) string {
	if len(c.Programs) == 0 {
		return "these programs"
	}
	names := make([]string, len(c.Programs))
	for i, p := range c.Programs {
		names[i] = filepath.Base(p)
	}
	return strings.Join(names, ", ")
}

// permissionOptions are a request's answers as ACP options, in nexus's order.
func permissionOptions(c abi.AIConfirmation) []acp.PermissionOption {
	var out []acp.PermissionOption
	for _, a := range c.Options {
		if o, ok := permissionOption(a, c); ok {
			out = append(out, o)
		}
	}
	return out
}

// answerOf is the nexus answer for the editor's outcome: the option chosen, else deny (a
// cancelled request, an option nexus did not offer).
func answerOf(out acp.RequestPermissionOutcome, c abi.AIConfirmation) string {
	if out.Selected == nil {
		return "deny"
	}
	id := string(out.Selected.OptionId)
	for _, a := range c.Options {
		if a == id {
			return id
		}
	}
	return "deny"
}

// refusalText is the turn error nexus's Anthropic client reports for a refusal.
const refusalText = "the model refused to answer"

// stopReason maps the end of a turn to the prompt's stop reason; an error turn that is not a
// refusal is the prompt's error instead (ok false). lastStop is the stop reason of the turn's
// last reply in the transcript ("length": the reply hit its token limit).
func stopReason(t abi.AITurn, errs []string, lastStop string) (acp.StopReason, bool) {
	switch t.End {
	case abi.TurnCompleted:
		if lastStop == "length" {
			return acp.StopReasonMaxTokens, true
		}
		return acp.StopReasonEndTurn, true
	case abi.TurnCancelled:
		return acp.StopReasonCancelled, true
	case abi.TurnMaxIterations, abi.TurnLoopDetected:
		return acp.StopReasonMaxTurnRequests, true
	}
	for _, e := range append([]string{t.Reason}, errs...) {
		if strings.Contains(e, refusalText) {
			return acp.StopReasonRefusal, true
		}
	}
	return "", false
}

// ACP's error code for a resource (a session) that does not exist.
const codeResourceNotFound = -32002

// requestError turns an error into a JSON-RPC error whose message says what went wrong (an ABI
// error keeps its code in data.code).
func requestError(err error) *acp.RequestError {
	var re *acp.RequestError
	if errors.As(err, &re) {
		return re
	}
	var ae *abi.Error
	if errors.As(err, &ae) {
		code := -32603
		switch ae.Code {
		case abi.CodeInvalidArgument:
			code = -32602
		case abi.CodeSessionNotFound:
			code = codeResourceNotFound
		}
		return &acp.RequestError{Code: code, Message: ae.Error(), Data: map[string]any{"code": string(ae.Code), "retriable": ae.Code.Retriable()}}
	}
	return &acp.RequestError{Code: -32603, Message: err.Error()}
}

func invalidParams(format string, args ...any) *acp.RequestError {
	return &acp.RequestError{Code: -32602, Message: fmt.Sprintf(format, args...)}
}

// maxToolText bounds a tool result's text sent to the editor (the transcript keeps it whole).
const maxToolText = 64 << 10

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut-- // never split a UTF-8 character
	}
	return s[:cut] + fmt.Sprintf("\n… (%d more bytes)", len(s)-cut)
}

// usageOf is a turn's token usage as ACP's (an unstable field of the prompt's answer).
func usageOf(u *abi.AIUsage) *acp.Usage {
	if u == nil {
		return nil
	}
	out := &acp.Usage{InputTokens: u.Input, OutputTokens: u.Output, TotalTokens: u.Total}
	if u.CacheRead > 0 {
		out.CachedReadTokens = acp.Ptr(u.CacheRead)
	}
	if u.CacheWrite > 0 {
		out.CachedWriteTokens = acp.Ptr(u.CacheWrite)
	}
	return out
}
