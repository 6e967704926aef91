package output

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Redaction is best effort: it catches the token shapes, name=value forms and command-line
// passwords listed in docs/agent-shells.md and literals the session assigned to secret-looking
// names, one line at a time (and a key's value on the next lines). See the package
// documentation for what it does not catch.

// Marker returns the text that replaces a secret of the given kind.
func Marker(kind string) string { return "[REDACTED:" + kind + "]" }

// Kinds of secret, as they appear in markers.
const (
	KindPrivateKey    = "private-key"
	KindAWSAccessKey  = "aws-access-key"
	KindGitHubToken   = "github-token"
	KindGitLabToken   = "gitlab-token"
	KindSlackToken    = "slack-token"
	KindStripeKey     = "stripe-key"
	KindGoogleAPIKey  = "google-api-key"
	KindAnthropicKey  = "anthropic-key"
	KindOpenAIKey     = "openai-key"
	KindJWT           = "jwt"
	KindURLPassword   = "url-password"
	KindAuthorization = "authorization"
	KindSecret        = "secret"
	KindLearned       = "learned"
)

// MinLearnedLen is the shortest literal (in bytes) the redactor learns: shorter values would
// redact common words ("test", "root") all over the output.
const MinLearnedLen = 6

// Limits on what one Redactor remembers.
const (
	maxLearned      = 1024
	maxLearnedBytes = 4096
)

// A rule finds one family of secrets in a line.
type rule struct {
	kind string
	// trig is the rule's bit in what scanTriggers finds: the rule runs only on lines where
	// that cheap scan saw a possible match.
	trig trigger
	re   *regexp.Regexp
	// group is the submatch replaced (0: the whole match).
	group int
	// keep, when set, is asked whether a found value is a real secret; false leaves it.
	keep func(value string) bool
	// learn: values this rule finds in a command are learned as literals.
	learn bool
}

var (
	pemInlineRE = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
	pemOpenRE   = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:\\[nr]|[A-Za-z0-9+/=\t ])*`)
	pemEndRE    = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
	// pemBodyRE: a line inside a PEM block — base64 (maybe quoted, with an escaped newline or a
	// continuation), an RFC 1421 header, or blank.
	pemBodyRE = regexp.MustCompile(`^\s*(?:(?:Proc-Type|DEK-Info|Comment|Version):.*|["']?[A-Za-z0-9+/=]*(?:\\n)?["']?\s*[+,\\]?)\s*$`)
)

// placeholders are values that are never secrets: type names, null-ish words, booleans.
var placeholders = map[string]bool{
	"string": true, "str": true, "&str": true, "number": true, "int": true, "integer": true,
	"bool": true, "boolean": true, "null": true, "nil": true, "none": true, "undefined": true,
	"true": true, "false": true, "any": true, "bytes": true, "object": true, "required": true,
	"optional": true, "redacted": true, "hidden": true, "unset": true, "empty": true,
}

// plausibleValue says whether v (unquoted, the part after name= or name:) could be a secret
// rather than a reference, a type, a placeholder or an already redacted value.
func plausibleValue(v, name string, quoted bool) bool {
	if len(v) < 3 {
		return false
	}
	switch v[0] {
	case '$', '{', '[', '<', '*', '%':
		return false
	}
	if placeholders[strings.ToLower(v)] {
		return false
	}
	if !quoted {
		if strings.ContainsRune(v, '(') || dottedIdent(v) {
			return false // a call or a field: token = getToken(), password: cfg.Password
		}
	}
	// `Token: token`, `password=password`: the value is the name, as in code.
	if strings.EqualFold(v, name) || strings.EqualFold(v, lastSegment(name)) {
		return false
	}
	return true
}

// dottedIdent: v is identifiers joined by dots (cfg.Password, self.token).
func dottedIdent(v string) bool {
	parts := 0
	for p := range strings.SplitSeq(v, ".") {
		if p == "" || p[0] >= '0' && p[0] <= '9' {
			return false
		}
		for i := 0; i < len(p); i++ {
			if !isWordByte(p[i]) {
				return false
			}
		}
		parts++
	}
	return parts >= 2
}

// lastSegment is the last part of a name split at _ . - (DB_PASSWORD -> PASSWORD).
func lastSegment(name string) string {
	if i := strings.LastIndexAny(name, "_.-"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// notRedacted skips values that are already markers or shell references.
func notRedacted(value string) bool {
	return value != "" && value[0] != '[' && value[0] != '$'
}

// lead is what may come right before a token shape: the start of the line, a byte that is not
// a letter or digit (so id_ghp_..., "ghp_..." and -ghp_... all count), or an escape that
// encodes a separator: \n, \t, \0 (a backslash and one character), \012, \x0a, \u000a,
// %0A. Tokens glued to a letter or digit (xghp_...) are not tokens. tokenStart is the same test
// for one position; the two must agree.
const lead = `(?:^|[^A-Za-z0-9]|\\[A-Za-z0-9]|\\[0-7]{2,3}|\\x[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}|%[0-9A-Fa-f]{2})`

// shape compiles a token shape preceded by lead; the token is submatch 1.
func shape(expr string) *regexp.Regexp { return regexp.MustCompile(lead + `(` + expr + `)`) }

// rules, in the order they run. The shape rules come first so a token gets its specific kind.
var rules = []rule{
	{kind: KindAWSAccessKey, trig: trigAWS, group: 1,
		re: shape(`(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b`)},
	{kind: KindGitHubToken, trig: trigGitHub, group: 1,
		re: shape(`gh[pousr]_[A-Za-z0-9]{36}[A-Za-z0-9]*|github_pat_[A-Za-z0-9_]{22}[A-Za-z0-9_]*`)},
	{kind: KindGitLabToken, trig: trigGitLab, group: 1,
		re: shape(`glpat-[A-Za-z0-9_-]{20}[A-Za-z0-9_-]*`)},
	{kind: KindSlackToken, trig: trigSlack, group: 1,
		re: shape(`xox[baprs]-[A-Za-z0-9-]{10}[A-Za-z0-9-]*`)},
	{kind: KindStripeKey, trig: trigStripe, group: 1,
		re: shape(`[sr]k_(?:live|test)_[A-Za-z0-9]{16}[A-Za-z0-9]*`)},
	{kind: KindGoogleAPIKey, trig: trigGoogle, group: 1,
		re: shape(`AIza[0-9A-Za-z_-]{35}`)},
	{kind: KindAnthropicKey, trig: trigAnthropic, group: 1,
		re: shape(`sk-ant-[A-Za-z0-9_-]{32}[A-Za-z0-9_-]*`)},
	{kind: KindOpenAIKey, trig: trigOpenAI, group: 1,
		re: shape(`sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32}[A-Za-z0-9_-]*`)},
	{kind: KindJWT, trig: trigJWT, group: 1,
		re: shape(`eyJ[A-Za-z0-9_-]{5}[A-Za-z0-9_-]*\.[A-Za-z0-9_-]{5}[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`)},
	{kind: KindURLPassword, trig: trigURL, group: 1, keep: notRedacted, learn: true,
		re: regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:([^\s@/]+)@`)},
	{kind: KindAuthorization, trig: trigAuthorization, group: 1, keep: notRedacted, learn: true,
		re: regexp.MustCompile(`(?i)` + lead + `authorization["']?\s*[:=]\s*["']?(?:bearer|basic|token|digest|bot)\s+([^\s"',;]+)`)},
	{kind: KindAuthorization, trig: trigBearer, group: 1, keep: notRedacted, learn: true,
		re: regexp.MustCompile(`(?i)` + lead + `bearer\s+([A-Za-z0-9._~+/-]{16}[A-Za-z0-9._~+/-]*=*)`)},
}

// learned is an immutable snapshot of the literals a Redactor has learned.
type learned struct {
	literals []string // in learning order (oldest first)
	replacer *strings.Replacer
}

// Redactor redacts secrets. One per agent-shell session; safe for concurrent use. Besides the
// fixed rules it learns literal values the session assigned to secret-looking names (Learn) and
// redacts them wherever they appear afterwards.
type Redactor struct {
	mu   sync.Mutex // serializes Learn
	snap atomic.Pointer[learned]
}

// NewRedactor returns a Redactor that knows no literals yet.
func NewRedactor() *Redactor { return &Redactor{} }

// defaultRedactor serves collectors created without one.
var defaultRedactor = NewRedactor()

// Learned returns how many literals the redactor knows.
func (r *Redactor) Learned() int {
	if s := r.snap.Load(); s != nil {
		return len(s.literals)
	}
	return 0
}

// MinLiteralLen is the shortest value LearnLiteral accepts, in bytes.
const MinLiteralLen = 4

// LearnLiteral remembers values known to be secret (an SSH password, a token the operator
// configured) exactly as given, to be redacted wherever they appear from now on. Values
// shorter than MinLiteralLen bytes are ignored (redacting "ab" everywhere would wreck the
// output); so are values with a newline.
func (r *Redactor) LearnLiteral(values ...string) {
	var vals []string
	for _, v := range values {
		if len(v) >= MinLiteralLen {
			vals = append(vals, v)
		}
	}
	if len(vals) > 0 {
		r.learnValues(vals, MinLiteralLen)
	}
}

// learnValues adds literals (at least minLen bytes, at most maxLearnedBytes), keeping the
// newest maxLearned.
func (r *Redactor) learnValues(vals []string, minLen int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lits []string
	if s := r.snap.Load(); s != nil {
		lits = slices.Clone(s.literals)
	}
	changed := false
	for _, v := range vals {
		if len(v) < minLen || len(v) > maxLearnedBytes || strings.ContainsAny(v, "\n\r") ||
			strings.HasPrefix(v, "[REDACTED:") || slices.Contains(lits, v) {
			continue
		}
		lits = append(lits, v)
		changed = true
	}
	if !changed {
		return
	}
	if len(lits) > maxLearned {
		lits = lits[len(lits)-maxLearned:]
	}
	// Longest first, so that of two literals matching at one position the longer wins.
	byLen := slices.Clone(lits)
	slices.SortStableFunc(byLen, func(a, b string) int { return len(b) - len(a) })
	mark := Marker(KindLearned)
	pairs := make([]string, 0, 2*len(byLen))
	for _, l := range byLen {
		pairs = append(pairs, l, mark)
	}
	r.snap.Store(&learned{literals: lits, replacer: strings.NewReplacer(pairs...)})
}

// redactLine redacts one line (no newline). It returns s itself when nothing matched. PEM
// blocks spanning lines are the caller's business (see pemState); a BEGIN...END block within
// the line, or a BEGIN header, is replaced here. If found is not nil it receives the values of
// rules marked learn.
func (r *Redactor) redactLine(s string, found func(string)) string {
	if s == "" {
		return s
	}
	trig := scanTriggers(s)
	if trig&trigPEM != 0 {
		s = pemInlineRE.ReplaceAllLiteralString(s, Marker(KindPrivateKey))
		s = pemOpenRE.ReplaceAllLiteralString(s, Marker(KindPrivateKey))
	}
	for i := range rules {
		ru := &rules[i]
		if ru.trig&trig == 0 {
			continue
		}
		s = ru.apply(s, found)
	}
	if trig&trigName != 0 {
		s = redactNameValues(s, found)
	}
	if trig&trigCLI != 0 {
		s = redactCLI(s, found)
	}
	if lt := r.snap.Load(); lt != nil {
		s = lt.replacer.Replace(s)
	}
	return s
}

// apply replaces the rule's matches in s.
func (ru *rule) apply(s string, found func(string)) string {
	ms := ru.re.FindAllStringSubmatchIndex(s, -1)
	if ms == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		lo, hi := m[2*ru.group], m[2*ru.group+1]
		if lo < 0 || ru.keep != nil && !ru.keep(s[lo:hi]) {
			continue
		}
		if found != nil && ru.learn {
			found(s[lo:hi])
		}
		if b.Len() == 0 {
			b.Grow(len(s))
		}
		b.WriteString(s[last:lo])
		b.WriteString(Marker(ru.kind))
		last = hi
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// span is a part of a line to redact: s[start:end].
type span struct{ start, end int }

// replaceSpans replaces each span of s (in order; one that overlaps the one before is skipped)
// with mark; found receives what each span held.
func replaceSpans(s string, spans []span, mark string, found func(string)) string {
	if spans == nil {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, v := range spans {
		if v.start < last {
			continue
		}
		if found != nil {
			found(s[v.start:v.end])
		}
		b.WriteString(s[last:v.start])
		b.WriteString(mark)
		last = v.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// pemState follows PEM private-key blocks across lines.
type pemState struct {
	open bool
}

// What a line is to a PEM block.
type pemEvent int

const (
	pemText  pemEvent = iota // an ordinary line (a non-body line also ends an open block)
	pemBegin                 // the line opens a block: it ends with the private-key marker
	pemBody                  // a body line of an open block: it vanishes
	pemEnd                   // the END line: the block ends; rest is what followed END
)

// line classifies one line, given raw and redacted (redactLine already replaced the BEGIN
// header and what follows it on its line, or a whole BEGIN...END block within the line).
// Body lines are base64, RFC 1421 headers or blank; any other line ends the block and is an
// ordinary line (or the start of another block).
func (p *pemState) line(raw, redacted string) (ev pemEvent, rest string) {
	if p.open {
		if pemEndRE.MatchString(raw) {
			p.open = false
			if l := pemEndRE.FindStringIndex(redacted); l != nil {
				rest = strings.TrimSpace(redacted[l[1]:])
			}
			return pemEnd, rest
		}
		if pemBodyRE.MatchString(raw) {
			return pemBody, ""
		}
		p.open = false
	}
	if strings.HasSuffix(redacted, Marker(KindPrivateKey)) && pemOpenRE.MatchString(raw) && !pemEndRE.MatchString(raw) {
		p.open = true
		return pemBegin, ""
	}
	return pemText, ""
}

// danglingState follows a secret-looking key whose value is on the following lines: a YAML or
// JSON key with nothing after its colon ("password:", then the value alone on the next line)
// or a YAML block scalar ("private_key: |", then every line indented deeper than the key).
type danglingState struct {
	next   bool // the next line, if it is a single value, is the secret
	block  bool // lines indented deeper than indent are the secret
	indent int
}

// line takes a line after the other rules: it redacts what an earlier key left dangling for
// it, and notes a dangling key the line ends with. changed says whether it redacted.
func (d *danglingState) line(s string) (out string, changed bool) {
	if !d.next && !d.block && !mayDangle(s) {
		return s, false // most lines: no key ends them, and none is pending
	}
	ind, rest := indentOf(s)
	switch {
	case d.block:
		if rest == "" {
			return s, false // blank lines belong to the block
		}
		if ind > d.indent {
			return s[:ind] + Marker(KindSecret), true
		}
		d.block = false
	case d.next:
		d.next = false
		if pre, _, post, ok := singleValue(rest); ok {
			return s[:ind] + pre + Marker(KindSecret) + post, true
		}
	}
	d.next, d.block, d.indent = false, false, ind
	key, block, ok := danglingKey(rest)
	if ok && secretName(key) && !strings.EqualFold(key, "pass") {
		d.next, d.block = !block, block
	}
	return s, false
}

// mayDangle: s ends (blanks aside) as a dangling key's line can, in ':' or a block scalar
// indicator (| > + - or a digit).
func mayDangle(s string) bool {
	for i := len(s) - 1; i >= 0; i-- {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\r':
		case c == ':' || c == '|' || c == '>' || c == '+' || c == '-' || '0' <= c && c <= '9':
			return true
		default:
			return false
		}
	}
	return false
}

func indentOf(s string) (int, string) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i, strings.TrimRight(s[i:], " \t\r")
}

// danglingKey reads a line (indentation off) that is only a key: `name:`, `"name":`,
// `- name:`, `{"name":`, or a block scalar header `name: |` (`>`, `|-`, `>+2`, ...).
func danglingKey(rest string) (key string, block bool, ok bool) {
	rest = strings.TrimLeft(rest, "{,- \t")
	k, tail, found := strings.Cut(rest, ":")
	if !found {
		return "", false, false
	}
	switch tail = strings.TrimSpace(tail); {
	case tail == "":
	case (tail[0] == '|' || tail[0] == '>') && strings.Trim(tail[1:], "+-0123456789") == "":
		block = true
	default:
		return "", false, false
	}
	if len(k) >= 2 && (k[0] == '"' || k[0] == '\'') && k[len(k)-1] == k[0] {
		k = k[1 : len(k)-1]
	}
	if k == "" {
		return "", false, false
	}
	for i := 0; i < len(k); i++ {
		if !isNameByte(k[i]) {
			return "", false, false
		}
	}
	return k, block, true
}

// singleValue reads a line (indentation off) that is a single value: a quoted string (maybe
// followed by a comma, as in JSON) or one word. pre and post are what stays around it.
func singleValue(rest string) (pre, v, post string, ok bool) {
	if rest == "" {
		return "", "", "", false
	}
	quoted := false
	if q := rest[0]; q == '"' || q == '\'' {
		end := strings.LastIndexByte(rest, q)
		if end <= 0 || strings.Trim(rest[end+1:], ", ") != "" {
			return "", "", "", false
		}
		pre, v, post, quoted = rest[:1], rest[1:end], rest[end:], true
	} else {
		v = strings.TrimSuffix(rest, ",")
		post = rest[len(v):]
		if strings.ContainsAny(v, " \t") {
			return "", "", "", false
		}
	}
	return pre, v, post, plausibleValue(v, "", quoted)
}

// Redact redacts a whole string: a command, an audit line. Lines are redacted one by one; a
// PEM private-key block across lines becomes one marker, and a value on the line after its
// secret-looking key (see danglingState) is redacted.
func (r *Redactor) Redact(s string) string {
	if !strings.Contains(s, "\n") {
		return r.redactLine(s, nil)
	}
	var pem pemState
	var dg danglingState
	var b strings.Builder
	b.Grow(len(s))
	for line := range strings.Lines(s) {
		body, nl := strings.CutSuffix(line, "\n")
		out, _ := dg.line(r.redactLine(body, nil))
		switch ev, rest := pem.line(body, out); ev {
		case pemBody:
			continue
		case pemEnd:
			if rest == "" {
				continue
			}
			out = rest
		}
		b.WriteString(out)
		if nl {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
