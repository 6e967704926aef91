package conversation

import (
	"bufio"
	"fmt"
	"html/template"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/transcript"
)

// export writes c's transcript in format to w; every check comes before the first byte.
func export(c chat, format ExportFormat, w io.Writer) error {
	switch format {
	case ExportJSONL:
		// Only a pi transcript is exported, even byte for byte; its header says so.
		fh, err := os.Open(c.Path) // #nosec G304 -- the transcript of a chat, or a file the user named
		if err != nil {
			return transcriptError(c.Path, err)
		}
		defer func() { _ = fh.Close() }()
		if _, err := transcript.NewReader(fh); err != nil {
			return transcriptError(c.Path, err)
		}
		if _, err := fh.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read transcript %s: %w", c.Path, err)
		}
		if _, err := io.Copy(w, fh); err != nil {
			return fmt.Errorf("copy transcript %s: %w", c.Path, err)
		}
		return nil
	case ExportMarkdown, ExportHTML:
		f, err := openTranscript(c.Path)
		if err != nil {
			return err
		}
		d, err := exportDocOf(f)
		_ = f.Close()
		if err != nil {
			return err
		}
		if format == ExportMarkdown {
			return writeMarkdown(w, d)
		}
		return writeHTML(w, d)
	}
	return abi.Errorf(abi.CodeInvalidArgument, c.SessionID, "unknown export format %q (want jsonl, md or html)", format)
}

// Abbreviation limits of the readable exports: tool traffic and thinking are cut, conversation
// text is kept whole.
const (
	exportToolChars     = 2000
	exportThinkingChars = 1000
)

// exportDoc is the readable form of a chat's active branch, rendered as Markdown or HTML.
type exportDoc struct {
	Title     string
	SessionID string
	Cwd       string
	Created   string
	LeafID    string
	Items     []exportItem
}

// exportItem is one entry of the branch.
type exportItem struct {
	ID        string
	Kind      string // user, assistant, tool, system: picks the style
	Heading   string
	Timestamp string
	Label     string
	Parts     []exportPart
}

// exportPart is a piece of an item: prose, thinking, or a code block (tool calls and results).
type exportPart struct {
	Kind  string // text, thinking, code, note
	Title string
	Text  string
}

// abbreviate cuts s to n runes and says how much was left out.
func abbreviate(s string, n int) string {
	// The head is sliced, not converted, unless it holds invalid UTF-8 (which the conversion
	// turns into U+FFFD): tool results may be megabytes long.
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return abbreviateRunes(s, n)
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	return s[:i] + fmt.Sprintf("\n… [%d more characters]", utf8.RuneCountInString(s[i:]))
}

func abbreviateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + fmt.Sprintf("\n… [%d more characters]", len(r)-n)
}

// blocksOf returns a message content as blocks; malformed content has none.
func blocksOf(content []byte) []transcript.Block {
	bs, err := transcript.Blocks(content)
	if err != nil {
		return nil
	}
	return bs
}

func blocksParts(bs []transcript.Block, full bool) []exportPart {
	var out []exportPart
	for _, b := range bs {
		switch b.Type {
		case "text":
			t := b.Text
			if !full {
				t = abbreviate(t, exportToolChars)
			}
			out = append(out, exportPart{Kind: "text", Text: t})
		case "thinking":
			t := b.Thinking
			if b.Redacted || t == "" {
				t = "[redacted]"
			}
			out = append(out, exportPart{Kind: "thinking", Text: abbreviate(t, exportThinkingChars)})
		case "toolCall":
			args := string(b.Arguments)
			if args == "" {
				args = "{}"
			}
			out = append(out, exportPart{Kind: "code", Title: "tool call " + b.Name + " (" + b.ID + ")", Text: abbreviate(args, exportToolChars)})
		case "image":
			out = append(out, exportPart{Kind: "note", Text: fmt.Sprintf("[image %s, %d bytes of base64]", b.MimeType, len(transcript.StringValue(b.Data)))})
		default:
			out = append(out, exportPart{Kind: "note", Text: "[" + b.Type + " block]"})
		}
	}
	return out
}

// exportDocOf renders the path to the active leaf, the entries before a compaction included
// (the file keeps them; the compaction shows where the model's view was cut).
func exportDocOf(f *transcript.File) (*exportDoc, error) {
	d := &exportDoc{SessionID: f.Header.ID, Cwd: f.Header.Cwd, Created: f.Header.Timestamp, Title: f.SessionName()}
	if d.Title == "" {
		d.Title = "Chat " + f.Header.ID
	}
	labels := f.Labels()
	path := f.Path("")
	if len(path) > 0 {
		d.LeafID = path[len(path)-1].ID
	}
	for e, err := range f.FullEntries(path) {
		if err != nil {
			return nil, fmt.Errorf("read entries: %w", err)
		}
		it := exportItem{ID: e.ID, Timestamp: e.Timestamp, Label: labels[e.ID], Kind: "system"}
		switch e.Type {
		case "message":
			// A malformed message is shown empty, as the reader tolerates it.
			m, _ := e.MessageInfo()
			switch m.Role {
			case "user":
				it.Kind, it.Heading = "user", "User"
				it.Parts = blocksParts(blocksOf(m.Content), true)
			case "assistant":
				it.Kind, it.Heading = "assistant", "Assistant"
				if m.Provider != "" || m.Model != "" {
					it.Heading += " · " + m.Provider + "/" + m.Model
				}
				it.Parts = blocksParts(blocksOf(m.Content), true)
				if m.ErrorMessage != "" || (m.StopReason != "" && m.StopReason != "stop" && m.StopReason != "toolUse") {
					it.Parts = append(it.Parts, exportPart{Kind: "note", Text: strings.TrimSpace("[" + m.StopReason + "] " + m.ErrorMessage)})
				}
			case "toolResult":
				it.Kind, it.Heading = "tool", "Tool result · "+m.ToolName
				if m.IsError {
					it.Heading += " (error)"
				}
				var texts []string
				var rest []exportPart
				for _, p := range blocksParts(blocksOf(m.Content), false) {
					if p.Kind == "text" {
						texts = append(texts, p.Text)
					} else {
						rest = append(rest, p)
					}
				}
				it.Parts = append([]exportPart{{Kind: "code", Title: m.ToolCallID, Text: abbreviate(strings.Join(texts, "\n"), exportToolChars)}}, rest...)
			case "bashExecution":
				it.Kind, it.Heading = "tool", "Shell"
				out := transcript.StringValue(m.Output)
				if m.ExitCode != nil {
					out += fmt.Sprintf("\n[exit %d]", *m.ExitCode)
				}
				it.Parts = []exportPart{{Kind: "code", Title: "$ " + m.Command, Text: abbreviate(out, exportToolChars)}}
			case "custom":
				it.Heading = "Extension message · " + m.CustomType
				it.Parts = blocksParts(blocksOf(m.Content), true)
			case "compactionSummary", "branchSummary":
				it.Heading = m.Role
				it.Parts = []exportPart{{Kind: "text", Text: transcript.StringValue(m.Summary)}}
			default:
				it.Heading = "Message · " + m.Role
			}
		case "compaction":
			it.Heading = "Compaction summary"
			it.Parts = []exportPart{{Kind: "note", Text: "Earlier messages reach the model only through this summary (first kept entry " + e.FirstKeptEntryID() + ")."}, {Kind: "text", Text: e.Summary()}}
		case "branch_summary":
			it.Heading = "Branch summary"
			it.Parts = []exportPart{{Kind: "text", Text: e.Summary()}}
		case "custom_message":
			it.Heading = "Extension message · " + e.CustomType
			it.Parts = blocksParts(blocksOf(e.Content()), true)
		case "model_change":
			it.Heading = "Model · " + e.Provider + "/" + e.ModelID
		case "thinking_level_change":
			it.Heading = "Thinking level · " + e.ThinkingLevel()
		case "session_info":
			if e.Name() != nil {
				it.Heading = "Name · " + *e.Name()
			} else {
				it.Heading = "Name cleared"
			}
		default:
			// Labels are shown on their targets; custom entries are extension state.
			continue
		}
		d.Items = append(d.Items, it)
	}
	return d, nil
}

// mdEscape keeps transcript text from becoming raw HTML in a Markdown viewer.
var mdEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// mdCode is s as inline code: backticks cannot end the span early.
func mdCode(s string, n int) string {
	return "`" + strings.ReplaceAll(OneLine(s, n), "`", "'") + "`"
}

// closeFences appends a closing fence when the text opens a fenced code block it does not
// close, so one message cannot swallow the rest of the document.
func closeFences(s string) string {
	open := ""
	for line := range strings.Lines(s) {
		t := strings.TrimRight(strings.TrimLeft(line, " "), "\r\n")
		if len(line)-len(strings.TrimLeft(line, " ")) > 3 {
			continue
		}
		for _, c := range []string{"`", "~"} {
			n := len(t) - len(strings.TrimLeft(t, c))
			if n < 3 {
				continue
			}
			switch {
			case open == "":
				open = strings.Repeat(c, n)
			case strings.HasPrefix(open, c) && n >= len(open) && strings.TrimSpace(t[n:]) == "":
				open = ""
			}
		}
	}
	if open == "" {
		return s
	}
	return strings.TrimRight(s, "\n") + "\n" + open
}

// fence returns a code fence longer than any backtick run in s, so content cannot close it.
func fence(s string) string {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}

func writeMarkdown(out io.Writer, d *exportDoc) error {
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "# %s\n\n", mdEscape.Replace(OneLine(d.Title, 200)))
	fmt.Fprintf(w, "- session: %s\n- cwd: %s\n- created: %s\n- leaf: %s\n", mdCode(d.SessionID, 200), mdCode(d.Cwd, 500), mdEscape.Replace(OneLine(d.Created, 40)), mdCode(d.LeafID, 200))
	for _, it := range d.Items {
		fmt.Fprintf(w, "\n## %s\n\n", mdEscape.Replace(OneLine(it.Heading, 200)))
		meta := mdCode(it.ID, 100) + " · " + mdEscape.Replace(OneLine(it.Timestamp, 40))
		if it.Label != "" {
			meta += " · label **" + mdEscape.Replace(OneLine(it.Label, 100)) + "**"
		}
		fmt.Fprintf(w, "<sub>%s</sub>\n", meta)
		for _, p := range it.Parts {
			switch p.Kind {
			case "text":
				fmt.Fprintf(w, "\n%s\n", closeFences(mdEscape.Replace(p.Text)))
			case "thinking":
				fmt.Fprintf(w, "\n> *thinking:* %s\n", strings.ReplaceAll(mdEscape.Replace(p.Text), "\n", "\n> "))
			case "note":
				fmt.Fprintf(w, "\n*%s*\n", mdEscape.Replace(OneLine(p.Text, 500)))
			case "code":
				fc := fence(p.Text)
				if p.Title != "" {
					fmt.Fprintf(w, "\n**%s**\n", mdEscape.Replace(OneLine(p.Title, 200)))
				}
				fmt.Fprintf(w, "\n%s\n%s\n%s\n", fc, p.Text, fc)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write markdown: %w", err)
	}
	return nil
}

// htmlPage is self-contained: inline style, no script, and a policy that forbids loading or
// running anything even if an escape were missed.
var htmlPage = template.Must(template.New("chat").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:15px/1.5 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f;background:#fff}
header dl{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;color:#555;font-size:13px}
header dd{margin:0;font-family:ui-monospace,monospace;overflow-wrap:anywhere}
article{border-left:4px solid #ccc;padding:.3rem 1rem;margin:1rem 0;border-radius:4px}
article.user{border-color:#2f6fde;background:#f3f7fe}
article.assistant{border-color:#2a9d55}
article.tool{border-color:#999;background:#fafafa}
article.system{border-color:#d99a00;background:#fffaf0}
h2{font-size:14px;margin:.2rem 0}
.meta{color:#777;font-size:12px;font-family:ui-monospace,monospace}
.label{background:#ffe680;border-radius:3px;padding:0 .3rem}
.text{white-space:pre-wrap;overflow-wrap:anywhere}
.thinking{white-space:pre-wrap;color:#666;font-style:italic;border-left:2px solid #ddd;padding-left:.6rem}
.note{color:#777;font-style:italic}
pre{background:#f0f0f0;padding:.5rem;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere;font-size:13px}
.ctitle{font-family:ui-monospace,monospace;font-size:12px;color:#444}
</style>
</head>
<body>
<header>
<h1>{{.Title}}</h1>
<dl><dt>session</dt><dd>{{.SessionID}}</dd><dt>cwd</dt><dd>{{.Cwd}}</dd><dt>created</dt><dd>{{.Created}}</dd><dt>leaf</dt><dd>{{.LeafID}}</dd></dl>
</header>
<main>
{{range .Items}}<article class="{{.Kind}}" id="e-{{.ID}}">
<h2>{{.Heading}}</h2>
<div class="meta">{{.ID}} · {{.Timestamp}}{{if .Label}} · <span class="label">{{.Label}}</span>{{end}}</div>
{{range .Parts}}{{if eq .Kind "text"}}<div class="text">{{.Text}}</div>
{{else if eq .Kind "thinking"}}<div class="thinking">{{.Text}}</div>
{{else if eq .Kind "note"}}<p class="note">{{.Text}}</p>
{{else}}{{if .Title}}<div class="ctitle">{{.Title}}</div>{{end}}<pre>{{.Text}}</pre>
{{end}}{{end}}</article>
{{end}}</main>
</body>
</html>
`))

func writeHTML(out io.Writer, d *exportDoc) error {
	w := bufio.NewWriter(out)
	if err := htmlPage.Execute(w, d); err != nil {
		return fmt.Errorf("render html: %w", err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write html: %w", err)
	}
	return nil
}
