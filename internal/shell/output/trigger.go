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
)

// interesting marks the bytes at which scanTriggers looks closer.
var interesting = func() (t [256]bool) {
	for _, c := range "aAbBcCkKpPsStTeEgGxXrR:" {
		t[c] = true
	}
	return t
}()

// scanTriggers finds, in one pass over s, which rules could match: a token prefix at the start
// of a word, a keyword of the name/value rules followed by a separator, "://" followed by
// user:password@, "authorization", "bearer", "private key". Most lines of ordinary output
// trigger nothing, and the regular expressions never run on them.
func scanTriggers(s string) trigger {
	var t trigger
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !interesting[c] {
			continue
		}
		rest := s[i:]
		wordStart := i == 0 || !isWordByte(s[i-1])
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
			if strings.HasPrefix(rest, "://") && urlCandidate(s, i) {
				t |= trigURL
			}
			continue
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
			if hasPrefixFold(rest, "pass") && nameCandidate(s, i, 4) || hasPrefixFold(rest, "pwd") && nameCandidate(s, i, 3) {
				t |= trigName
			}
		case 's':
			if hasPrefixFold(rest, "secret") && nameCandidate(s, i, 6) {
				t |= trigName
			}
		case 't':
			if hasPrefixFold(rest, "token") && nameCandidate(s, i, 5) {
				t |= trigName
			}
		case 'k':
			if hasPrefixFold(rest, "key") && nameCandidate(s, i, 3) {
				t |= trigName
			}
		case 'c':
			if hasPrefixFold(rest, "credential") && nameCandidate(s, i, 10) {
				t |= trigName
			}
		}
	}
	return t
}

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

// nameCandidate is the name/value rules' prefilter for a keyword of length n at s[i:]: the
// name around it is followed by = or : (after an optional quote and blanks), or is a --name
// followed by a blank. A bare "pass" or "pwd" (not password/passwd/passphrase) needs one of
// _ . - before it, or for "pass" alone, an =.
func nameCandidate(s string, i, n int) bool {
	b := i
	for b > 0 && isNameByte(s[b-1]) {
		b--
	}
	e := i + n
	for e < len(s) && isNameByte(s[e]) {
		e++
	}
	bare := n <= 4 && (s[i]|0x20) == 'p' && !hasPrefixFold(s[i:], "passw") && !hasPrefixFold(s[i:], "passp")
	if bare && i > b && strings.IndexByte("_.-", s[i-1]) < 0 {
		return false
	}
	if !bare && strings.HasPrefix(s[b:], "--") && e < len(s) && (s[e] == ' ' || s[e] == '\t') {
		return true
	}
	j := e
	if j < len(s) && (s[j] == '"' || s[j] == '\'') {
		j++
	}
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	return j < len(s) && (s[j] == '=' || s[j] == ':' && (!bare || i != b))
}

// urlCandidate is the URL-password rule's prefilter for "://" at s[i:]: user:password@ follows
// with no blank or / in between.
func urlCandidate(s string, i int) bool {
	colon := false
	for j := i + 3; j < len(s); j++ {
		switch s[j] {
		case ':':
			colon = true
		case '@':
			return colon
		case ' ', '\t', '/':
			return false
		}
	}
	return false
}
