// Package output turns a command's raw output into what an agent sees (SHELL.md, "Techniques"
// and "Redaction"): clean, redact, then budget, streaming and in bounded memory.
//
// # Pipeline
//
// A Collector takes one stream of one command as raw chunks (Write) and, at Finish, returns
// the text, a shell.StreamReport and whether anything was dropped:
//
//  1. clean: escape sequences (CSI, OSC incl. OSC 8 hyperlinks, DCS, SOS/PM/APC) and C0
//     controls other than \n and \t are removed; a \r line keeps its last frame; \b erases
//     the rune before it; invalid UTF-8 becomes U+FFFD; NUL and C1 controls are removed.
//  2. redact each complete line (Redactor); a PEM private-key block across lines becomes one
//     "[REDACTED:private-key]" line.
//  3. budget: grep (RE2 over the cleaned, redacted line) with context lines and "--" between
//     groups that are not adjacent (only when context > 0); then keep all / head N / tail N /
//     head_tail N (ceil(N/2) first, floor(N/2) last) with a "... [K lines elided] ..." line;
//     then max_chars (default shell.DefaultMaxChars) keeps a head and a tail of the text, at
//     most max_chars runes together, with one "... [K chars elided] ..." line between. The
//     cuts snap to a line end when one is near and never split a redaction marker.
//
// lines_total counts every line the stream produced (a last line without \n counts when it
// has any text); lines_kept counts the stream lines that appear in the text, whole or in part
// (a PEM block shown as its marker counts as all its lines).
//
// # Memory
//
// A collector holds at most about max_chars runes of head and max_chars runes of tail, the
// current line (a line longer than 3*max(max_chars, 64Ki) runes keeps only its first and last
// max(max_chars, 64Ki) runes; the middle is counted, not held), up to grep.context lines of
// before-context (also bounded in size), and for tail/head_tail only the last max_chars runes
// of the kept lines (older ones could only show in the middle, which the character cap cuts).
//
// # Redaction is best effort
//
// It runs on one line at a time, after cleaning, before any cut. What it catches: the token
// shapes of AWS access key ids, GitHub, GitLab, Slack, Stripe, Google API keys, OpenAI and
// Anthropic keys, JWTs; passwords in URLs; Authorization: Bearer/Basic/Token values and
// "Bearer <long token>"; name=value, name: value, "name": "value", name => value and
// --name value where the name ends like password, passwd, passphrase, secret, token, api_key,
// private_key, access_key, secret_key, credential(s), _pass or _pwd (case-insensitive); PEM
// private-key blocks; and literals the session assigned (Redactor.Learn). It does not catch:
//   - secrets without a known shape or a secret-looking name next to them (an AWS secret
//     access key printed alone, a password printed alone that the session never assigned
//     literally, e.g. one read from a file or assigned from $(...) or another variable);
//   - secrets split across lines (other than PEM blocks) or printed in pieces, encoded
//     (base64, URL-encoded, JSON-escaped) or transformed;
//   - name/value forms with the value on the next line (YAML block scalars), values with
//     spaces unless quoted, and unquoted values past the first , ; & ) } ] or space;
//   - learned literals shorter than MinLearnedLen bytes, and more than 1024 of them (oldest
//     forgotten);
//   - values it deliberately leaves because they look like code or placeholders: $VAR,
//     ${...}, <...>, ***, f(x), obj.field, type names (string, bool, ...), null/true/false,
//     the name itself (Token: token), values shorter than 3 characters.
//
// It also redacts some things that are not secrets (e.g. "sk-" followed by 32 token
// characters, long strings after "Bearer", a 6+ character password learned earlier wherever
// the same text appears).
//
// Over-long lines (see Memory) are redacted in their kept head and tail; since a secret might
// straddle a cut, the run of non-delimiter characters touching each cut is dropped too (it is
// counted as elided), so no fragment of a token, name=value or literal that crosses the cut
// survives.
package output
