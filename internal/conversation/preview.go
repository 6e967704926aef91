package conversation

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/transcript"
)

// PreviewLen bounds the one-line text previews of a tree's entries and of history rows.
const PreviewLen = 72

// previewBytes is the head of a text that OneLine reads for a preview of PreviewLen runes: a
// preview decodes no more of a message than that.
const previewBytes = 8 * PreviewLen

// OneLine squeezes white space (newlines included) and control characters to single spaces and
// cuts s to at most n runes (n >= 1), so a preview never breaks a table row or a terminal.
func OneLine(s string, n int) string {
	// Only the head can show; tool results may be megabytes long.
	if len(s) > 8*n {
		s = s[:8*n]
	}
	s = strings.ToValidUTF8(s, "")
	// The fields of s joined by single spaces, built only up to rune n+1: that is enough to know
	// whether it needs cutting.
	var b strings.Builder
	runes, cut := 0, 0 // cut: the byte length after n-1 runes
	emit := func(r rune) bool {
		if runes == n {
			return false
		}
		if runes == n-1 {
			cut = b.Len()
		}
		b.WriteRune(r)
		runes++
		return true
	}
	pending := false
	for _, r := range s {
		if isSeparator(r) {
			pending = runes > 0
			continue
		}
		if pending {
			pending = false
			if !emit(' ') {
				return b.String()[:cut] + "…"
			}
		}
		if !emit(r) {
			return b.String()[:cut] + "…"
		}
	}
	return b.String()
}

// isSeparator reports the runes OneLine turns into spaces: white space, control and format
// characters (bidi overrides included).
func isSeparator(r rune) bool {
	if r < utf8.RuneSelf {
		return r <= ' ' || r == 0x7f
	}
	return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// preview is the short text shown for an entry of a tree; e must be a full entry.
func preview(e *transcript.Entry) string {
	switch e.Type {
	case "message":
		// A malformed message has no preview, as the reader tolerates it.
		m, _ := e.MessageInfo()
		return OneLine(messagePreview(m), PreviewLen)
	case "model_change":
		return e.Provider + "/" + e.ModelID
	case "thinking_level_change":
		return e.ThinkingLevel()
	case "compaction", "branch_summary":
		return OneLine(e.Summary(), PreviewLen)
	case "custom":
		return e.CustomType
	case "custom_message":
		return OneLine(e.CustomType+": "+transcript.FirstText(e.Content(), previewBytes), PreviewLen)
	case "label":
		if e.Label() == nil || *e.Label() == "" {
			return e.TargetID() + " (cleared)"
		}
		return OneLine(e.TargetID()+" = "+*e.Label(), PreviewLen)
	case "session_info":
		if e.Name() == nil {
			return "(name cleared)"
		}
		return OneLine(*e.Name(), PreviewLen)
	case "context_edit":
		return "edits " + e.TargetID()
	}
	return ""
}

// messagePreview reads only the head of the first text: the texts it returns end the previews
// that OneLine cuts to previewBytes.
func messagePreview(m transcript.MessageInfo) string {
	switch m.Role {
	case "user", "custom":
		return transcript.FirstText(m.Content, previewBytes)
	case "assistant":
		if t := transcript.FirstText(m.Content, previewBytes); t != "" {
			return t
		}
		if len(m.ToolCalls) > 0 {
			names := make([]string, len(m.ToolCalls))
			for i, c := range m.ToolCalls {
				names[i] = c.Name
			}
			return "[tool call: " + strings.Join(names, ", ") + "]"
		}
		if m.ErrorMessage != "" {
			return "[" + m.StopReason + ": " + m.ErrorMessage + "]"
		}
		if m.StopReason != "" && m.StopReason != "stop" {
			return "[" + m.StopReason + "]"
		}
		return ""
	case "toolResult":
		t := transcript.FirstText(m.Content, previewBytes)
		if m.IsError {
			return fmt.Sprintf("[%s error] %s", m.ToolName, t)
		}
		return fmt.Sprintf("[%s] %s", m.ToolName, t)
	case "bashExecution":
		return "$ " + m.Command
	case "compactionSummary", "branchSummary":
		return transcript.StringValue(m.Summary)
	}
	return ""
}

// PreviewMessage is the role and one-line preview of an agent message (a history row); a
// message that does not parse is role "?" without preview.
func PreviewMessage(msg json.RawMessage) (role, preview string) {
	info, err := transcript.ParseMessageInfo(msg)
	if err != nil {
		return "?", ""
	}
	return info.Role, OneLine(messagePreview(info), PreviewLen)
}
