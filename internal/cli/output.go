package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/nexus-run/nexus/internal/abi"
)

// Output formats of object-printing commands.
const (
	formatJSON  = "json"
	formatTable = "table"
)

func checkFormat(f string) error {
	if f != formatJSON && f != formatTable {
		return abi.Errorf(abi.CodeInvalidArgument, "", "unknown --format %q (want json or table)", f)
	}
	return nil
}

func sessionTable(w io.Writer, ss []abi.Session) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION ID\tTYPE\tSTATUS\tCONTEXT\tCREATED\tEXPIRES")
	for _, s := range ss {
		exp := s.ExpiresAt
		if exp == "" {
			exp = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.SessionID, s.Type, s.Status, contextString(s.Context), s.CreatedAt, exp)
	}
	_ = tw.Flush()
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

func sessionDetail(w io.Writer, s abi.Session) {
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
	_ = tw.Flush()
}

// Event stream formats.
const (
	eventsRaw     = "json-raw"
	eventsCompact = "json-compact"
)

// compactEvent renders an event on one line without the envelope's repetition: seq and event
// first, then the payload's fields (minus its type tag) flattened.
func compactEvent(e abi.Event) ([]byte, error) {
	var payload map[string]json.RawMessage
	if len(e.Payload) > 0 {
		if err := json.Unmarshal(e.Payload, &payload); err != nil {
			return nil, fmt.Errorf("decode payload: %w", err)
		}
	}
	delete(payload, "type")
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
		kb, _ := json.Marshal(k)
		b = append(b, ',')
		b = append(b, kb...)
		b = append(b, ':')
		b = append(b, payload[k]...)
	}
	return append(b, '}'), nil
}
