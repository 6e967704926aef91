package output

import (
	"strings"
)

// The name/value rule, by hand rather than by regular expression (a case-insensitive
// expression with these alternations runs Go's NFA at ~25 µs a line): name=value,
// name: value, "name": "value", name => value, name := value and --name value, where the name
// looks secret (secretName). The value is quoted ("..." or '...', the quotes kept around the
// marker) or a run up to a blank, a quote, a backtick or one of , ; & ) } ].

// keywordEnds are the endings (lowercase) that make a name secret-looking.
var keywordEnds = func() []string {
	ends := []string{"password", "passwd", "passphrase", "secret", "token", "credential", "credentials",
		"keybase", "key_base", "key-base"}
	for _, k := range []string{"api", "private", "access", "secret", "auth", "signing", "encryption"} {
		ends = append(ends, k+"key", k+"_key", k+"-key")
	}
	for _, k := range []string{"pass", "pwd"} {
		ends = append(ends, "_"+k, "."+k, "-"+k)
	}
	return ends
}()

// secretName reports whether a name (dashes and quotes already off) looks like it holds a
// secret: it ends (case-insensitively) in one of keywordEnds, optionally followed by a digit
// run or "value" (TOKEN2, MY_SECRET_VALUE). A name that is just "pass" counts too (the caller
// decides where that is allowed).
func secretName(name string) bool {
	if len(name) < 3 || len(name) > 128 {
		return false
	}
	var buf [128]byte
	n := buf[:len(name)]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		n[i] = c
	}
	s := string(n) // small; does not escape the comparisons below
	if t := strings.TrimRight(s, "0123456789"); t != s {
		s = strings.TrimRight(t, "_-")
	} else if t, ok := strings.CutSuffix(s, "value"); ok {
		s = strings.TrimRight(t, "_-")
	}
	if s == "pass" {
		return true
	}
	for _, e := range keywordEnds {
		if strings.HasSuffix(s, e) {
			return true
		}
	}
	return false
}

// nameValue is one found pair: the value's span (for a quoted value, the inside).
type nameValue struct {
	valStart, valEnd int
}

// findNameValues returns the secret name/value pairs in s, in order, not overlapping.
func findNameValues(s string) []nameValue {
	var out []nameValue
	done := 0 // s[:done] is consumed
	for i := 0; i < len(s); i++ {
		n := keywordAt(s, i)
		if n == 0 {
			continue
		}
		b := i
		for b > done && isNameByte(s[b-1]) {
			b--
		}
		e := i + n
		for e < len(s) && isNameByte(s[e]) {
			e++
		}
		name := strings.TrimLeft(s[b:e], "-")
		flag := strings.HasPrefix(s[b:e], "--")
		if !secretName(name) {
			i = e - 1 // the other keywords of this run make the same name
			continue
		}
		bare := strings.EqualFold(name, "pass")
		j := e
		switch {
		case flag && j < len(s) && (s[j] == ' ' || s[j] == '\t'):
			j = skipBlanks(s, j)
		default:
			if j < len(s) && (s[j] == '"' || s[j] == '\'') {
				j++
			}
			j = skipBlanks(s, j)
			switch {
			case strings.HasPrefix(s[j:], "=>") || strings.HasPrefix(s[j:], ":="):
				j += 2
			case j < len(s) && s[j] == '=':
				j++
			case j < len(s) && s[j] == ':' && !bare:
				j++
			default:
				i = e - 1
				continue
			}
			j = skipBlanks(s, j)
		}
		vs, ve, quoted, ok := valueAt(s, j)
		if !ok {
			i = e - 1
			continue
		}
		v := s[vs:ve]
		if flag && !quoted && strings.Trim(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_-") == "" {
			ok = false // help text: --token TOKEN
		}
		if ok && plausibleValue(v, name, quoted) {
			out = append(out, nameValue{vs, ve})
		}
		end := ve
		if quoted {
			end++
		}
		done, i = end, end-1
	}
	return out
}

// keywordAt returns the length of a name keyword starting at s[i] (case-insensitive), or 0.
func keywordAt(s string, i int) int {
	switch s[i] | 0x20 {
	case 'p':
		switch {
		case hasPrefixFold(s[i:], "pass"):
			return 4
		case hasPrefixFold(s[i:], "pwd"):
			return 3
		}
	case 's':
		if hasPrefixFold(s[i:], "secret") {
			return 6
		}
	case 't':
		if hasPrefixFold(s[i:], "token") {
			return 5
		}
	case 'k':
		if hasPrefixFold(s[i:], "key") {
			return 3
		}
	case 'c':
		if hasPrefixFold(s[i:], "credential") {
			return 10
		}
	}
	return 0
}

func skipBlanks(s string, j int) int {
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	return j
}

// valueAt parses the value at s[j:]: quoted (the span is the inside) or a bare run.
func valueAt(s string, j int) (vs, ve int, quoted, ok bool) {
	if j >= len(s) {
		return 0, 0, false, false
	}
	switch q := s[j]; q {
	case '"':
		for k := j + 1; k < len(s); k++ {
			switch s[k] {
			case '\\':
				k++
			case '"':
				return j + 1, k, true, true
			}
		}
		return 0, 0, false, false
	case '\'':
		if k := strings.IndexByte(s[j+1:], '\''); k >= 0 {
			return j + 1, j + 1 + k, true, true
		}
		return 0, 0, false, false
	}
	k := j
	for k < len(s) && !endsBareValue(s[k]) {
		k++
	}
	return j, k, false, k > j
}

func endsBareValue(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f', '"', '\'', '`', ',', ';', '&', ')', '}', ']':
		return true
	}
	return false
}

// redactNameValues replaces the values findNameValues finds; found receives each value.
func redactNameValues(s string, found func(string)) string {
	nvs := findNameValues(s)
	if nvs == nil {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	mark := Marker(KindSecret)
	for _, nv := range nvs {
		if found != nil {
			found(s[nv.valStart:nv.valEnd])
		}
		b.WriteString(s[last:nv.valStart])
		b.WriteString(mark)
		last = nv.valEnd
	}
	b.WriteString(s[last:])
	return b.String()
}
