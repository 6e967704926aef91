// Package output turns a command's raw output into what an agent sees (docs/agent-shells.md,
// "Output: cleaning, redaction, budgets"): clean, redact, then budget, streaming and in bounded
// memory.
//
// # Pipeline
//
// A Collector takes one stream of one command as raw chunks (Write) and, at Finish, returns
// the text, a shell.StreamReport and whether anything was dropped:
//
//  1. clean: escape sequences (CSI, OSC incl. OSC 8 hyperlinks, DCS, SOS/PM/APC, other ESC
//     sequences; an unterminated one swallows at most 1 MiB) and C0 controls other than \n and
//     \t are removed; a \r line keeps its last frame ("a\rb\rc\n" is "c\n", "\r\n" is a
//     newline, a \r at the end of a line or of the stream changes nothing); \b erases the rune
//     before it; invalid UTF-8 becomes U+FFFD (one per bad byte); NUL and C1 controls are
//     removed. Bytes >= 0x80 are always UTF-8, never 8-bit C1 controls.
//  2. redact each complete line (Redactor); a PEM private-key block across lines becomes one
//     "[REDACTED:private-key]" line.
//  3. budget: grep (RE2 over the cleaned, redacted line) with context lines and a "--" line
//     between groups that are not adjacent (only when context > 0, as grep -C); then keep
//     all / head N / tail N / head_tail N (ceil(N/2) first, floor(N/2) last) with a
//     "... [K lines elided] ..." line where lines were dropped; then max_chars (default
//     shell.DefaultMaxChars, counted in runes, newlines included) keeps a head (about half)
//     and a tail (the rest) of the text with one "... [K chars elided] ..." line between
//     them. The cuts snap to a line end when one is near, never split a redaction marker,
//     an elision marker or a separator.
//
// The report: mode is "grep" when a grep pattern was given, else the keep mode ("all" by
// default). lines_total counts every line the stream produced (a last line without \n counts
// when it has any text); lines_kept counts the stream lines that appear in the text, whole or
// in part (a PEM block shown as its marker counts as all its lines). Finish's truncated is true
// when anything the stream produced is missing from the text: lines grep did not select,
// lines keep dropped, characters the cap elided.
//
// # Memory
//
// A collector holds at most about max_chars runes of head and max_chars runes of tail; the
// current line (a line longer than 3*max(max_chars, 64Ki) runes keeps only its first and last
// max(max_chars, 64Ki) runes, the middle counted, not held); up to grep.context lines of
// before-context (also bounded in size); and for tail and head_tail only the text of the last
// max_chars runes of the window (older lines of the window could only show in the middle of
// the result, where the character cap cuts) plus 4 bytes per line of the window as counts.
// Budgets are capped accordingly: max_chars <= MaxMaxChars, lines <= MaxLines, context <=
// MaxContext. Feeding 200 MB of output keeps the heap under ~20 MB (see TestBoundedMemory).
//
// # Redaction is best effort
//
// It runs on one line at a time, after cleaning, before any cut (with two cross-line rules, see
// below). What it catches: the token shapes of AWS access key ids, GitHub, GitLab, Slack,
// Stripe, Google API keys, OpenAI and Anthropic keys, JWTs, wherever a token may start: after
// any byte that is not a letter or digit (id_ghp_..., /ghp_...), after an escape that encodes a
// separator (\n, \t, \0, \012, \x0a, \u000a: "line\nghp_..." inside a JSON string) and after a
// percent-encoding (q=a%0Ask-proj-...); passwords in URLs; Authorization: Bearer/Basic/Token
// values and "Bearer <long token>" (after such escapes too); name=value, name: value,
// "name": "value", name => value and --name value where the name ends like password, passwd,
// passphrase, secret, token, api_key, private_key, access_key, secret_key, auth_key, key_base,
// credential(s), _pass or _pwd (case-insensitive, optionally followed by digits or "value":
// TOKEN2, MY_SECRET_VALUE), or is pass= , also JSON-escaped (\"password\": \"...\"), with the
// value after an escaped line break ("password:\nhunter2") and URL-encoded (password%3D...,
// %22token%22%3A%22...%22); across lines, the value alone on the line after a key with nothing
// after its colon (YAML "password:" then the value, pretty-printed JSON) and every line of a
// YAML block scalar under such a key ("private_key: |"); passwords on the command lines of
// common programs (cli.go: mysql/mariadb -pSECRET, curl -u user:SECRET, sshpass -p, redis-cli
// -a, smbclient -U user%SECRET, ldap* -w, zip -P, 7z -p, openssl pass:SECRET, keytool
// -storepass, mongosh -p, sqlcmd -P, docker/podman login -p, skopeo --creds, xfreerdp /p:,
// lftp -u user,SECRET, ssh-keygen -N/-P, snmp* -A/-X, plink -pw, sqlplus user/SECRET,
// htpasswd -b, aws configure set, git config, npm config, nmcli ... password), in a command
// or in ps output alike; PEM private-key blocks; and literals the session assigned
// (Redactor.Learn, which also learns the command-line passwords). It does not catch:
//   - secrets without a known shape or a secret-looking name next to them (an AWS secret
//     access key printed alone, a password printed alone that the session never assigned
//     literally, e.g. one read from a file or assigned from $(...) or another variable);
//   - secrets split across lines (other than PEM blocks and the key/value lines above) or
//     printed in pieces, encoded otherwise (base64, encoded twice) or transformed;
//   - a value on the line after its key when it is not alone on that line, or a blank line
//     comes between; values with spaces unless quoted, and unquoted values past the first
//     , ; & ) } ] or space;
//   - passwords given to programs not in the command-line table, or positionally (other than
//     sqlplus and htpasswd -b);
//   - learned literals shorter than MinLearnedLen bytes, and more than 1024 of them (oldest
//     forgotten);
//   - values it deliberately leaves because they look like code or placeholders: $VAR,
//     ${...}, <...>, ***, %..., f(x), obj.field, type names (string, bool, ...),
//     null/true/false, the name itself (Token: token), values shorter than 3 characters, and
//     for --name VALUE an all-capitals VALUE (help text);
//   - tokens glued to a preceding letter or digit (xghp_...): "task-" must not make "sk-" a key;
//   - in an over-long line, a learned literal containing spaces that straddles a cut can
//     leave the part after the space; grep sees only the kept head and tail of such a line.
//
// Output it hides that is not secret: body-looking lines (base64, one word, blank) right after
// a private-key BEGIN line until END or a line that is not body; up to 1 MiB after an
// unterminated escape sequence (as a terminal would).
//
// It also redacts some things that are not secrets (e.g. "sk-" followed by 32 token
// characters, long strings after "Bearer", a 6+ character password learned earlier wherever
// the same text appears, the word after a password flag of the command-line table in prose
// such as "zip -P option", a lone word on the line after "token:").
//
// Over-long lines (see Memory) are redacted in their kept head and tail; since a secret might
// straddle a cut, the run of non-delimiter characters touching each cut (at most 4096 characters of it) is dropped too (it is
// counted as elided), so no fragment of a token, name=value or literal that crosses the cut
// survives.
package output
