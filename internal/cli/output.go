package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
)

// Output formats of object-printing commands.
const (
	formatJSON  = "json"
	formatTable = "table"
)

// marshalLine encodes v as one line of JSON (no newline) the way all the CLI's JSON output is
// written: <, > and & as themselves, not Go's HTML escapes. The output is read by people and
// programs, never put in a page; and the escapes the gateway's own encoding left in raw JSON
// (a tool call's arguments) are undone too, so arguments read like results.
func marshalLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return unescapeHTML(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// unescapeHTML turns the \u003c, \u003e and \u0026 escapes of JSON text into the characters
// they stand for; the text means the same. An escaped backslash is a pair of its own, so a
// literal "\\u003c" (a backslash, then u003c) is kept.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch strings.ToLower(string(b[i+2 : i+6])) {
			case "003c":
				out, i = append(out, '<'), i+5
				continue
			case "003e":
				out, i = append(out, '>'), i+5
				continue
			case "0026":
				out, i = append(out, '&'), i+5
				continue
			}
		}
		out, i = append(out, b[i], b[i+1]), i+1
	}
	return out
}

// print writes v in the --format the user chose: JSON, or a table drawn by table (nil: the
// generic key/value table of v's fields).
func (a *app) print(format string, v any, table func(io.Writer) error) error {
	if format != formatTable {
		a.printJSON(v)
		return nil
	}
	if table != nil {
		return table(a.env.Stdout)
	}
	return kvTable(a.env.Stdout, v)
}

// printing makes cmd a command that prints what run returns, in --format json or table (the
// generic key/value table).
func (a *app) printing(cmd *cobra.Command, run func(cmd *cobra.Command, args []string) (any, error)) *cobra.Command {
	var format string
	cmd.RunE = func(c *cobra.Command, args []string) error {
		v, err := run(c, args)
		if err != nil {
			return err
		}
		return a.print(format, v, nil)
	}
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

// kvTable draws any JSON-encodable value as "key  value" rows, one per scalar, nested fields
// named by dotted paths (entry.sessionId, errors.0.type) in the order JSON prints them.
func kvTable(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var rows [][2]string
	if err := flattenJSON(dec, "", &rows); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return flushTable(tw)
}

// flattenJSON appends the scalars of the next JSON value of dec as rows named under prefix.
func flattenJSON(dec *json.Decoder, prefix string, rows *[][2]string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	name := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch t := tok.(type) {
	case json.Delim:
		n := 0
		for dec.More() {
			key := strconv.Itoa(n)
			if t == '{' {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ = kt.(string)
			}
			if err := flattenJSON(dec, name(key), rows); err != nil {
				return err
			}
			n++
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		if n == 0 {
			*rows = append(*rows, [2]string{prefix, "-"})
		}
	case nil:
		*rows = append(*rows, [2]string{prefix, "-"})
	case string:
		*rows = append(*rows, [2]string{prefix, cellText(t)})
	case json.Number:
		*rows = append(*rows, [2]string{prefix, t.String()})
	case bool:
		*rows = append(*rows, [2]string{prefix, strconv.FormatBool(t)})
	}
	return nil
}

// cellText keeps a table cell on one line: a string with line breaks, tabs or other control
// characters is shown Go-quoted, so nothing is lost or misread.
func cellText(s string) string {
	if s == "" {
		return `""`
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func sessionTable(w io.Writer, ss []abi.Session) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION ID\tTYPE\tSTATUS\tCONTEXT\tCREATED\tEXPIRES")
	for _, s := range ss {
		exp := s.ExpiresAt
		if exp == "" {
			exp = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.SessionID, s.Type, s.Status, contextString(s.Context), s.CreatedAt, exp)
	}
	return flushTable(tw)
}

// printSession prints a session object as JSON or as sessionDetail's table.
func (a *app) printSession(format string, s abi.Session) error {
	return a.print(format, s, func(w io.Writer) error { return sessionDetail(w, s) })
}

func contextString(c abi.Context) string {
	var parts []string
	for _, kv := range [][2]string{{"project", c.ProjectID}, {"roadmap", c.RoadmapID}, {"chat", c.ChatID}, {"process", c.ProcessID}, {"server", c.ServerID}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func sessionDetail(w io.Writer, s abi.Session) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("Session ID", s.SessionID)
	row("Type", s.Type)
	row("Status", s.Status)
	row("Transport", s.Transport)
	row("Created", s.CreatedAt)
	if s.ExpiresAt != "" {
		row("Expires", s.ExpiresAt)
	}
	row("Context", contextString(s.Context))
	var caps []string
	c := s.Capabilities
	for _, kv := range []struct {
		n string
		v bool
	}{{"send", c.Send}, {"receive", c.Receive}, {"interrupt", c.Interrupt}, {"resize", c.Resize}, {"close", c.Close}, {"restart", c.Restart}, {"stream", c.Stream}} {
		if kv.v {
			caps = append(caps, kv.n)
		}
	}
	row("Capabilities", strings.Join(caps, ", "))
	keys := make([]string, 0, len(s.Metadata))
	for k := range s.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("  "+k, s.Metadata[k])
	}
	return flushTable(tw)
}

// compactEvent renders an event on one line without the envelope's repetition: seq and event
// first, then the payload's fields (minus its type tag) flattened.
func compactEvent(e abi.Event) ([]byte, error) {
	var payload map[string]json.RawMessage
	if len(e.Payload) > 0 {
		if err := json.Unmarshal(e.Payload, &payload); err != nil {
			return nil, fmt.Errorf("decode payload: %w", err)
		}
	}
	// The payload's type repeats the event's name, except in data events other than terminal
	// output (ai-chat's), where it says which payload it is.
	if t := string(payload["type"]); e.Event != abi.EventData || t == `"`+abi.PayloadTerminalOutput+`"` {
		delete(payload, "type")
	}
	if e.Event == abi.EventData {
		if ct, ok := payload["contentType"]; ok && string(ct) != `"raw"` {
			delete(payload, "contentType")
		}
	}
	keys := make([]string, 0, len(payload))
	for k := range payload {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := fmt.Appendf(nil, `{"seq":%d,"event":%q`, e.Seq, e.Event)
	for _, k := range keys {
		kb, _ := marshalLine(k)
		b = append(b, ',')
		b = append(b, kb...)
		b = append(b, ':')
		b = append(b, payload[k]...)
	}
	return unescapeHTML(append(b, '}')), nil
}
