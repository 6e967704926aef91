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

// findNameValues returns the secret name/value pairs in s, in order, not overlapping.
func findNameValues(s string) []span {
	var out []span
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
		encoded := false
		switch {
		case flag && j < len(s) && (s[j] == ' ' || s[j] == '\t'):
			j = skipBlanks(s, j)
		default:
			j = afterName(s, j)
			sep, n, enc := separator(s, j)
			if sep == 0 || sep == ':' && bare {
				i = e - 1
				continue
			}
			j, encoded = skipValueBlanks(s, j+n), enc
		}
		vs, ve, quoted, ok := valueAt(s, j, encoded)
		if !ok {
			i = e - 1
			continue
		}
		v := s[vs:ve]
		if flag && !quoted && strings.Trim(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_-") == "" {
			ok = false // help text: --token TOKEN
		}
		if ok && plausibleValue(v, name, quoted) {
			out = append(out, span{vs, ve})
		}
		end := ve
		if quoted {
			end++
		}
		done, i = end, end-1
	}
	return out
}

// afterName skips what may close a quoted name (" ' and, in escaped or URL-encoded text, \"
// %22) and blanks after a name that ends at s[e].
func afterName(s string, e int) int {
	j := e
	switch {
	case j < len(s) && (s[j] == '"' || s[j] == '\''):
		j++
	case strings.HasPrefix(s[j:], `\"`):
		j += 2
	case hasPrefixFold(s[j:], "%22"):
		j += 3
	}
	return skipBlanks(s, j)
}

// separator reads the separator at s[j:]: '=' for =, => and := (and a URL-encoded %3D), ':'
// for : (and %3A); n is its length, encoded whether it was URL-encoded. sep 0: none.
func separator(s string, j int) (sep byte, n int, encoded bool) {
	switch {
	case strings.HasPrefix(s[j:], "=>"), strings.HasPrefix(s[j:], ":="):
		return '=', 2, false
	case j < len(s) && s[j] == '=':
		return '=', 1, false
	case j < len(s) && s[j] == ':':
		return ':', 1, false
	case hasPrefixFold(s[j:], "%3d"):
		return '=', 3, true
	case hasPrefixFold(s[j:], "%3a"):
		return ':', 3, true
	}
	return 0, 0, false
}

// skipValueBlanks skips blanks before a value, and escaped ones: in a JSON string a value
// may follow "name:\n".
func skipValueBlanks(s string, j int) int {
	for {
		j = skipBlanks(s, j)
		if j+1 < len(s) && s[j] == '\\' && (s[j+1] == 'n' || s[j+1] == 't' || s[j+1] == 'r') {
			j += 2
			continue
		}
		return j
	}
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

// valueAt parses the value at s[j:]: quoted (the span is the inside) or a bare run. Quotes may
// be escaped (\"...\" in a JSON string) or, after a URL-encoded separator, encoded (%22). A
// bare run also ends at an escaped quote or line break, and after an encoded separator at an
// encoded delimiter.
func valueAt(s string, j int, encoded bool) (vs, ve int, quoted, ok bool) {
	if j >= len(s) {
		return 0, 0, false, false
	}
	switch q := s[j]; {
	case q == '"':
		for k := j + 1; k < len(s); k++ {
			switch s[k] {
			case '\\':
				k++
			case '"':
				return j + 1, k, true, true
			}
		}
		return 0, 0, false, false
	case q == '\'':
		if k := strings.IndexByte(s[j+1:], '\''); k >= 0 {
			return j + 1, j + 1 + k, true, true
		}
		return 0, 0, false, false
	case strings.HasPrefix(s[j:], `\"`):
		for k := j + 2; k+1 < len(s); k++ {
			if s[k] == '\\' {
				if s[k+1] == '"' {
					return j + 2, k, true, true
				}
				k++
			}
		}
		return 0, 0, false, false
	case encoded && (hasPrefixFold(s[j:], "%22") || hasPrefixFold(s[j:], "%27")):
		if k := strings.Index(s[j+3:], s[j:j+3]); k >= 0 { // %22 or %27: no letters to fold
			return j + 3, j + 3 + k, true, true
		}
		return 0, 0, false, false
	}
	k := j
	for k < len(s) && !endsBareValue(s[k]) {
		if s[k] == '\\' && k+1 < len(s) && strings.IndexByte(`"ntr`, s[k+1]) >= 0 {
			break
		}
		if encoded && s[k] == '%' && encodedDelim(s[k:]) {
			break
		}
		k++
	}
	return j, k, false, k > j
}

// encodedDelim: s starts with the URL encoding of a byte that ends a bare value.
func encodedDelim(s string) bool {
	if len(s) < 3 {
		return false
	}
	switch strings.ToUpper(s[1:3]) {
	case "20", "22", "26", "27", "2C", "3B", "29", "5D", "7D", "0A", "0D", "09":
		return true
	}
	return false
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
	return replaceSpans(s, findNameValues(s), Marker(KindSecret), found)
}
