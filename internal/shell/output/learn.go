package output

import (
	"regexp"
	"strings"
)

var (
	// assignRE finds NAME=, --name= and -e NAME= words: export/declare/local/readonly
	// assignments, env prefixes, make variables, docker -e.
	assignRE = regexp.MustCompile(`(?:^|[\s;&|(])-{0,2}([A-Za-z_][A-Za-z0-9_.-]*)=`)
	// flagRE finds `--name VALUE`.
	flagRE = regexp.MustCompile(`(?:^|\s)--([A-Za-z0-9_.-]+)[ \t]+`)
	// readHereRE finds `read [-rs...] VAR <<< WORD`.
	readHereRE = regexp.MustCompile(`\bread\b([^;&|\n]*)<<<[ \t]*`)
	readSilent = regexp.MustCompile(`(?:^|\s)-[A-Za-z]*s`)
	// echoPipeRE finds `echo WORD |` / `printf WORD |` feeding a password reader.
	echoPipeRE   = regexp.MustCompile(`\b(?:echo|printf)[ \t]+(?:-[neE]+[ \t]+)*`)
	pwReaderRE   = regexp.MustCompile(`(?i)--pass(?:word)?-stdin\b|\bchpasswd\b|\bpasswd\b|\bsudo\b[^|;&\n]*\s-S\b`)
	identifierRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// Learn reads a command before it runs and remembers, as literals to redact from then on, the
// values it assigns to secret-looking names as far as they are visible in its text:
// `export API_TOKEN=abc123xyz`, `DB_PASSWORD="p@ss w0rd" cmd`, `docker run -e TOKEN=...`,
// `--password=...`, `--token ...`, `read -s PW <<< '...'`, `echo '...' | docker login
// --password-stdin`, passwords in URLs, Authorization headers, and every name=value the
// redaction rules would redact. Values that are not static text ($VAR, $(...), backticks) are
// not known until run time and are not learned. Literals shorter than MinLearnedLen bytes are
// ignored.
func (r *Redactor) Learn(command string) {
	var vals []string
	add := func(v string) {
		if len(v) >= MinLearnedLen {
			vals = append(vals, v)
		}
	}
	// What the rules find (name=value, URL passwords, Authorization).
	for line := range strings.Lines(command) {
		r.redactLine(strings.TrimSuffix(line, "\n"), add)
	}
	// Shell words, with quoting understood.
	for _, m := range assignRE.FindAllStringSubmatchIndex(command, -1) {
		name := command[m[2]:m[3]]
		if !secretName(strings.TrimLeft(name, "-")) {
			continue
		}
		if v, ok := shellWord(command[m[1]:]); ok && plausibleValue(v, name, true) {
			add(v)
		}
	}
	for _, m := range flagRE.FindAllStringSubmatchIndex(command, -1) {
		name := command[m[2]:m[3]]
		if !secretName(strings.TrimLeft(name, "-")) {
			continue
		}
		if v, ok := shellWord(command[m[1]:]); ok && plausibleValue(v, name, true) {
			add(v)
		}
	}
	for _, m := range readHereRE.FindAllStringSubmatchIndex(command, -1) {
		args := command[m[2]:m[3]]
		secret := readSilent.MatchString(args)
		for _, id := range identifierRE.FindAllString(args, -1) {
			secret = secret || secretName(id)
		}
		if v, ok := shellWord(command[m[1]:]); ok && secret {
			add(v)
		}
	}
	for _, m := range echoPipeRE.FindAllStringIndex(command, -1) {
		rest := command[m[1]:]
		v, ok := shellWord(rest)
		if !ok {
			continue
		}
		// The word must be followed by a pipe into something that reads a password.
		after := strings.TrimLeft(rest[wordLen(rest):], " \t")
		if !strings.HasPrefix(after, "|") || strings.HasPrefix(after, "||") {
			continue
		}
		seg := after[1:]
		if i := strings.IndexAny(seg, ";&|\n"); i >= 0 {
			seg = seg[:i]
		}
		if pwReaderRE.MatchString(seg) {
			add(v)
		}
	}
	if len(vals) > 0 {
		r.learnValues(vals, MinLearnedLen)
	}
}

// shellWord parses the shell word at the start of s and returns its value when the word is
// static text (quotes and backslashes resolved, no expansion).
func shellWord(s string) (string, bool) {
	var b strings.Builder
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 2
		case c == '"':
			i++
			for {
				if i >= len(s) {
					return "", false
				}
				d := s[i]
				if d == '"' {
					i++
					break
				}
				if d == '$' || d == '`' {
					return "", false
				}
				if d == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					if s[i+1] != '\n' {
						b.WriteByte(s[i+1])
					}
					i += 2
					continue
				}
				b.WriteByte(d)
				i++
			}
		case c == '\\':
			if i+1 < len(s) {
				if s[i+1] != '\n' {
					b.WriteByte(s[i+1])
				}
				i += 2
			} else {
				i++
			}
		case c == '$' || c == '`':
			return "", false
		case c == ' ' || c == '\t' || c == '\n' || strings.IndexByte(";&|()<>", c) >= 0:
			return b.String(), b.Len() > 0
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), b.Len() > 0
}

// wordLen is the length in bytes of the shell word at the start of s (quotes included).
func wordLen(s string) int {
	i := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return len(s)
			}
			i += j + 2
		case c == '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case c == '\\':
			i += 2
		case c == ' ' || c == '\t' || c == '\n' || strings.IndexByte(";&|()<>", c) >= 0:
			return i
		default:
			i++
		}
	}
	return min(i, len(s))
}
