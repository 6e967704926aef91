package output

import "strings"

// trigger is a set of rules a line may need (one bit per rule family).
type trigger uint32

const (
	trigAWS trigger = 1 << iota
	trigGitHub
	trigGitLab
	trigSlack
	trigStripe
	trigGoogle
	trigAnthropic
	trigOpenAI
	trigJWT
	trigURL
	trigAuthorization
	trigBearer
	trigName
	trigPEM
	trigCLI
)

// pairTable marks two-byte starts: t[c] is a bit set of the bytes that may follow c.
type pairTable [256][4]uint64

func (t *pairTable) add(a, b byte)      { t[a][b>>6] |= 1 << (b & 63) }
func (t *pairTable) has(a, b byte) bool { return t[a][b>>6]&(1<<(b&63)) != 0 }

// pairs marks the two-byte starts of tokens, keywords and command-line flags: scanTriggers
// looks closer only there, so most positions of ordinary text are rejected with one load.
var pairs = func() (t pairTable) {
	add := t.add
	fold := func(a, b byte) {
		for _, x := range []byte{a, a - 32} {
			for _, y := range []byte{b, b - 32} {
				add(x, y)
			}
		}
	}
	for _, p := range []string{"AK", "AS", "AB", "AC", "AI", "gh", "gi", "gl", "xo", "sk", "rk", "ey", ":/", " -", "\t-", "/p", "sq"} {
		add(p[0], p[1])
	}
	for _, p := range []string{"au", "be", "pr", "pa", "pw", "se", "to", "ke", "cr"} {
		fold(p[0], p[1])
	}
	return t
}()

// cliFlagStarts are the bytes after " -" that may begin a password flag of the command-line
// table (-p, -u, -U, -a, -w, -s, -P, -N, -A, -X, -k, -b, -deststorepass, -new, --...).
const cliFlagStarts = "puUawsPNAXkbdn-"

// scanTriggers finds, in one pass over s, which rules could match: a token prefix at the start
// of a word, a keyword of the name/value rules followed by a separator, "://" followed by
// user:password@, "authorization", "bearer", "private key", the name of a program that takes
// a password on its command line. Most lines of ordinary output
// trigger nothing, and the regular expressions never run on them.
func scanTriggers(s string) trigger {
	var t trigger
	var run nameRun // the name run of the last keyword seen
	urlStop := -1   // "://" before this offset was already looked at
	for i := 0; i+1 < len(s); i++ {
		c, n := s[i], s[i+1]
		if !pairs.has(c, n) {
			continue
		}
		rest := s[i:]
		wordStart := tokenStart(s, i)
		switch c {
		case 'A':
			if wordStart && len(rest) >= 4 {
				switch rest[:4] {
				case "AKIA", "ASIA", "ABIA", "ACCA":
					t |= trigAWS
				case "AIza":
					t |= trigGoogle
				}
			}
		case 'g':
			if wordStart && len(rest) >= 4 && rest[1] == 'h' && rest[3] == '_' && strings.IndexByte("pousr", rest[2]) >= 0 ||
				wordStart && strings.HasPrefix(rest, "github_pat_") {
				t |= trigGitHub
			}
			if wordStart && strings.HasPrefix(rest, "glpat-") {
				t |= trigGitLab
			}
		case 'x':
			if wordStart && strings.HasPrefix(rest, "xox") {
				t |= trigSlack
			}
		case 's', 'r':
			if wordStart && len(rest) >= 3 && rest[1] == 'k' {
				switch {
				case strings.HasPrefix(rest[2:], "_live_") || strings.HasPrefix(rest[2:], "_test_"):
					t |= trigStripe
				case c == 's' && rest[2] == '-':
					if strings.HasPrefix(rest, "sk-ant-") {
						t |= trigAnthropic
					} else {
						t |= trigOpenAI
					}
				}
			}
		case 'e':
			if wordStart && strings.HasPrefix(rest, "eyJ") {
				t |= trigJWT
			}
		case ':':
			if i >= urlStop && t&trigURL == 0 && strings.HasPrefix(rest, "://") {
				var ok bool
				if ok, urlStop = urlCandidate(s, i); ok {
					t |= trigURL
				}
			}
			continue
		// The command-line rules look for a program only on a line with a flag it may take
		// (or a secret-looking word, below, for `aws configure set NAME VALUE` and the like).
		case ' ', '\t':
			if len(rest) >= 3 && strings.IndexByte(cliFlagStarts, rest[2]) >= 0 {
				t |= trigCLI
			}
			continue
		case '/':
			if strings.HasPrefix(rest, "/p:") {
				t |= trigCLI
			}
			continue
		}
		if c == 's' && strings.HasPrefix(rest, "sqlplus") {
			t |= trigCLI
		}
		// Case-insensitive words.
		switch c | 0x20 {
		case 'a':
			if hasPrefixFold(rest, "authorization") {
				t |= trigAuthorization
			}
		case 'b':
			if hasPrefixFold(rest, "bearer") {
				t |= trigBearer
			}
		case 'p':
			if hasPrefixFold(rest, "private key") {
				t |= trigPEM
			}
		}
		if t&(trigName|trigCLI) != trigName|trigCLI {
			if n := keywordAt(s, i); n > 0 {
				if t&trigName == 0 && run.candidate(s, i, n) {
					t |= trigName
				}
				run.at(s, i, n)
				if t&trigCLI == 0 && run.e < len(s) && (s[run.e] == ' ' || s[run.e] == '\t') {
					t |= trigCLI // a secret-looking word, then a blank: git config user.password X
				}
			}
		}
	}
	return t
}

// tokenStart reports whether a token shape may start at s[i] (see lead, which it mirrors):
// at the start, after a byte that is not a letter or digit, or after an escape or a
// percent-encoding.
func tokenStart(s string, i int) bool {
	if i == 0 || !isAlnum(s[i-1]) {
		return true
	}
	switch {
	case i >= 2 && s[i-2] == '\\': // \n, \t, \0
		return true
	case i >= 3 && s[i-3] == '%' && isHex(s[i-2]) && isHex(s[i-1]): // %0A
		return true
	case i >= 3 && s[i-3] == '\\' && isOctal(s[i-2]) && isOctal(s[i-1]): // \12
		return true
	case i >= 4 && s[i-4] == '\\' && (s[i-3] == 'x' && isHex(s[i-2]) && isHex(s[i-1]) || // \x0a
		isOctal(s[i-3]) && isOctal(s[i-2]) && isOctal(s[i-1])): // \012
		return true
	case i >= 6 && s[i-6] == '\\' && s[i-5] == 'u' && isHex(s[i-4]) && isHex(s[i-3]) && isHex(s[i-2]) && isHex(s[i-1]): // \u000a
		return true
	}
	return false
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
func isHex(c byte) bool   { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
func isOctal(c byte) bool { return '0' <= c && c <= '7' }

// hasPrefixFold: s starts with lit (lowercase ASCII), ignoring ASCII case.
func hasPrefixFold(s, lit string) bool {
	if len(s) < len(lit) {
		return false
	}
	for j := 0; j < len(lit); j++ {
		c := s[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[j] {
			return false
		}
	}
	return true
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isNameByte(c byte) bool { return isWordByte(c) || c == '.' || c == '-' }

// nameRun is what the name/value prefilter knows about one run of name bytes: where it is,
// whether it is a --flag followed by a blank, and the separator after it (= or :, after an
// optional closing quote and blanks). Keywords in one run share it, which keeps the scan
// linear.
type nameRun struct {
	b, e      int
	flagBlank bool
	sep       byte
}

// candidate is the name/value rules' prefilter for a keyword of length n at s[i:]: its name
// is followed by = or :, or is a --name followed by a blank. A bare "pass" or "pwd" (not
// password/passwd/passphrase) needs one of _ . - before it, or for "pass" alone, an =.
func (r *nameRun) candidate(s string, i, n int) bool {
	r.at(s, i, n)
	bare := n <= 4 && (s[i]|0x20) == 'p' && !hasPrefixFold(s[i:], "passw") && !hasPrefixFold(s[i:], "passp")
	if bare && i > r.b && strings.IndexByte("_.-", s[i-1]) < 0 {
		return false
	}
	if !bare && r.flagBlank {
		return true
	}
	return r.sep == '=' || r.sep == ':' && (!bare || i != r.b)
}

// at makes r the run of the keyword of length n at s[i:], measuring it only when the keyword
// is past the run measured last (a run's keywords share it).
func (r *nameRun) at(s string, i, n int) {
	if i >= r.e || r.e == 0 {
		b := i
		for b > r.e && isNameByte(s[b-1]) {
			b--
		}
		e := i + n
		for e < len(s) && isNameByte(s[e]) {
			e++
		}
		*r = nameRun{b: b, e: e}
		r.flagBlank = strings.HasPrefix(s[b:], "--") && e < len(s) && (s[e] == ' ' || s[e] == '\t')
		r.sep, _, _ = separator(s, afterName(s, e))
	}
}

// urlCandidate is the URL-password rule's prefilter for "://" at s[i:]: user:password@ follows
// with no blank or / in between. It also returns where it stopped looking: another "://"
// before that offset cannot do better, so the caller skips it (keeping the scan linear).
func urlCandidate(s string, i int) (bool, int) {
	colon := false
	for j := i + 3; j < len(s); j++ {
		switch s[j] {
		case ':':
			colon = true
		case '@':
			return colon, j
		case ' ', '\t', '/':
			return false, j
		}
	}
	return false, len(s)
}
