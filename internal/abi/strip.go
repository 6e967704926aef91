package abi

import "github.com/charmbracelet/x/ansi/parser"

// StripANSI removes escape sequences (CSI, OSC, DCS, SOS/PM/APC strings, ESC sequences) from
// terminal output and keeps printable text and C0 controls such as \r and \n. It walks the
// same DEC/ECMA-48 state table as charmbracelet/x/ansi.Strip (a test holds the two equal) but
// imports only the table: the ansi package's width tables cost every nexus invocation ~20 ms of
// start-up, for a function the CLI never needs.
func StripANSI(b []byte) string {
	out := make([]byte, 0, len(b))
	state := parser.GroundState
	pending := 0 // bytes of a UTF-8 sequence still to copy
	for _, c := range b {
		if pending > 0 {
			out = append(out, c)
			pending--
			if pending == 0 {
				state = parser.GroundState
			}
			continue
		}
		next, action := parser.Table.Transition(state, c)
		switch action {
		case parser.CollectAction:
			if next == parser.Utf8State {
				pending = utf8Len(c) - 1
				out = append(out, c)
				if pending <= 0 {
					pending, next = 0, parser.GroundState
				}
			}
		case parser.PrintAction, parser.ExecuteAction:
			out = append(out, c)
		}
		state = next
	}
	return string(out)
}

func utf8Len(b byte) int {
	switch {
	case b < 0x80:
		return 1
	case b >= 0xC0 && b <= 0xDF:
		return 2
	case b >= 0xE0 && b <= 0xEF:
		return 3
	case b >= 0xF0 && b <= 0xF7:
		return 4
	}
	return -1
}
