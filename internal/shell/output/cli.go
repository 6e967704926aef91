package output

import "strings"

// Passwords on command lines: programs that take a secret as an argument, in a command an
// agent runs, in `ps` output, in shell history. Each program's flags and the form of their
// value are listed; a line is read as words (quotes understood) after the program's name, up
// to the end of that command (; | & ) or a backtick).

// cliForm is how a flag carries its secret.
type cliForm uint8

const (
	cliGlued      cliForm = iota // the value is glued to the flag: mysql -pSECRET, 7z -pSECRET, xfreerdp /p:SECRET
	cliNext                      // the value is the next word: sshpass -p SECRET
	cliEither                    // glued or the next word
	cliUserPass                  // user:SECRET, glued or next (curl -u, skopeo --creds)
	cliUserPct                   // user%SECRET, glued or next (smbclient -U)
	cliUserComma                 // user,SECRET as the next word (lftp -u)
	cliPassPrefix                // pass:SECRET as the next word (openssl -passin; env: and file: are not secrets)
	cliKeyValue                  // a secret-looking word, then its value (aws configure set aws_secret_access_key V)
	cliSlashPass                 // the first word that is not a flag is user/SECRET[@db] (sqlplus)
	cliLastWord                  // when a short-option word has the flag's letter, the last word (htpasswd -b file user SECRET)
)

type cliFlag struct {
	flag string
	form cliForm
}

// cliProgram is what one program (or family) takes.
type cliProgram struct {
	names []string
	sub   string // the subcommand the flags belong to ("login" for docker), or ""
	flags []cliFlag
}

var cliPrograms = []cliProgram{
	{names: []string{"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mysqlslap",
		"mysqlbinlog", "mysqlsh", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-show", "mariadb-check",
		"mariadb-slap", "mariadb-binlog"},
		flags: []cliFlag{{"-p", cliGlued}}}, // -p alone prompts; -p WORD names a database
	{names: []string{"sshpass"}, flags: []cliFlag{{"-p", cliEither}}},
	{names: []string{"curl"}, flags: []cliFlag{{"-u", cliUserPass}, {"--user", cliUserPass}, {"-U", cliUserPass}, {"--proxy-user", cliUserPass},
		{"--oauth2-bearer", cliNext}}},
	{names: []string{"redis-cli", "valkey-cli", "keydb-cli"}, flags: []cliFlag{{"-a", cliNext}, {"--pass", cliNext}, {"--askpass", cliNext}}},
	{names: []string{"smbclient", "rpcclient", "smbcacls", "smbget", "smbtree", "smbcquotas", "smbmap", "net"},
		flags: []cliFlag{{"-U", cliUserPct}, {"--user", cliUserPct}}},
	{names: []string{"ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapmodrdn", "ldapwhoami", "ldapcompare", "ldapexop"},
		flags: []cliFlag{{"-w", cliEither}}},
	{names: []string{"ldappasswd"}, flags: []cliFlag{{"-w", cliEither}, {"-s", cliEither}, {"-a", cliEither}}},
	{names: []string{"zip", "zipcloak", "unzip", "funzip"}, flags: []cliFlag{{"-P", cliNext}, {"--password", cliNext}}},
	{names: []string{"7z", "7za", "7zr", "7zz"}, flags: []cliFlag{{"-p", cliGlued}}},
	{names: []string{"openssl"}, flags: []cliFlag{{"-passin", cliPassPrefix}, {"-passout", cliPassPrefix}, {"-pass", cliPassPrefix},
		{"-password", cliPassPrefix}, {"-k", cliNext}}},
	{names: []string{"keytool", "jarsigner"}, flags: []cliFlag{{"-storepass", cliNext}, {"-keypass", cliNext}, {"-srcstorepass", cliNext},
		{"-deststorepass", cliNext}, {"-srckeypass", cliNext}, {"-destkeypass", cliNext}, {"-new", cliNext}}},
	{names: []string{"mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport", "mongostat", "mongotop", "mongofiles"},
		flags: []cliFlag{{"-p", cliNext}}},
	{names: []string{"sqlcmd", "bcp", "osql"}, flags: []cliFlag{{"-P", cliEither}}},
	{names: []string{"docker", "podman", "nerdctl", "buildah", "oras", "crane"}, sub: "login", flags: []cliFlag{{"-p", cliNext}}},
	{names: []string{"az"}, sub: "login", flags: []cliFlag{{"-p", cliNext}}},
	{names: []string{"skopeo"}, flags: []cliFlag{{"--creds", cliUserPass}, {"--src-creds", cliUserPass}, {"--dest-creds", cliUserPass}}},
	{names: []string{"xfreerdp", "wlfreerdp", "sdl-freerdp", "xfreerdp3", "sdl-freerdp3"}, flags: []cliFlag{{"/p:", cliGlued}}},
	{names: []string{"rdesktop"}, flags: []cliFlag{{"-p", cliNext}}},
	{names: []string{"lftp"}, flags: []cliFlag{{"-u", cliUserComma}}},
	{names: []string{"ssh-keygen"}, flags: []cliFlag{{"-N", cliNext}, {"-P", cliNext}}},
	{names: []string{"snmpwalk", "snmpbulkwalk", "snmpget", "snmpgetnext", "snmpbulkget", "snmpset", "snmptable", "snmptrap", "snmpinform"},
		flags: []cliFlag{{"-A", cliNext}, {"-X", cliNext}}},
	{names: []string{"pscp", "plink", "putty", "psftp"}, flags: []cliFlag{{"-pw", cliNext}}},
	{names: []string{"useradd", "usermod"}, flags: []cliFlag{{"-p", cliNext}}},
	{names: []string{"sqlplus"}, flags: []cliFlag{{"", cliSlashPass}}},
	{names: []string{"htpasswd"}, flags: []cliFlag{{"b", cliLastWord}}},
	{names: []string{"aws"}, sub: "configure", flags: []cliFlag{{"", cliKeyValue}}},
	{names: []string{"git"}, sub: "config", flags: []cliFlag{{"", cliKeyValue}}},
	{names: []string{"npm", "pnpm", "yarn"}, sub: "config", flags: []cliFlag{{"", cliKeyValue}}},
	{names: []string{"nmcli"}, flags: []cliFlag{{"", cliKeyValue}}},
}

// cliIndex maps a program's name to its entry.
var cliIndex = func() map[string]*cliProgram {
	m := map[string]*cliProgram{}
	for i := range cliPrograms {
		for _, n := range cliPrograms[i].names {
			m[n] = &cliPrograms[i]
		}
	}
	return m
}()

// cliFirst marks the bytes a program name in cliIndex starts with, cliPairs its first two
// bytes: most words are rejected before the map is asked.
var cliFirst = func() (t [256]bool) {
	for n := range cliIndex {
		t[n[0]] = true
	}
	return t
}()

var cliPairs = func() (t pairTable) {
	for n := range cliIndex {
		t.add(n[0], n[1])
	}
	return t
}()

// cliProgramAt returns the program whose name is the word at s[i:] (i at a word start, a path
// before it allowed: /usr/bin/mysql), followed by a blank; and the end of the word.
func cliProgramAt(s string, i int) (*cliProgram, int) {
	e := i
	for e < len(s) && e-i <= cliMaxName && isNameByte(s[e]) {
		e++
	}
	if e == i || e-i > cliMaxName || e >= len(s) || s[e] != ' ' && s[e] != '\t' {
		return nil, 0
	}
	return cliIndex[s[i:e]], e
}

// cliMaxName is the length of the longest name in cliIndex: a longer word is no program's.
var cliMaxName = func() (n int) {
	for name := range cliIndex {
		n = max(n, len(name))
	}
	return n
}()

// cliWordStart: a program name may start at s[i] (after a blank, a path's slash, a quote, or
// the shell's ( ; | & ` $ {).
func cliWordStart(s string, i int) bool { return i == 0 || cliBefore[s[i-1]] }

var cliBefore = func() (t [256]bool) {
	for _, c := range []byte(" \t/\"'(;|&`${") {
		t[c] = true
	}
	return t
}()

// cliWord is one shell word of a command line: its span in the line.
type cliWord struct{ start, end int }

// cliWords reads the words of one command, one at a time (no slice of them all: a line can be
// long).
type cliWords struct {
	s string
	i int
}

// next returns the next word, or false at the end of the command (; | & ) ` a newline, a
// quote that is never closed: the end of a command nested in quotes, as in ssh host "mysql
// -pX") or at a word naming another program in the table, whose flags are its own (sshpass
// -p X ssh host mysql -pY); reading stops before that word. So every word is read once.
func (w *cliWords) next() (cliWord, bool) {
	s, i := w.s, skipBlanks(w.s, w.i)
	w.i = i
	if i >= len(s) || strings.IndexByte(";|&)`\n", s[i]) >= 0 {
		return cliWord{}, false
	}
	start := i
word:
	for i < len(s) {
		switch c := s[i]; c {
		case ' ', '\t', ';', '|', '&', ')', '`', '\n':
			break word
		case '\'', '"':
			k := strings.IndexByte(s[i+1:], c)
			if k < 0 {
				break word
			}
			i += k + 2
			continue
		case '\\':
			i++
		}
		i++
	}
	i = min(i, len(s))
	if i == start {
		return cliWord{}, false // a quote that is never closed
	}
	word := s[start:i]
	if base := word[strings.LastIndexByte(word, '/')+1:]; base != "" && cliFirst[base[0]] && len(base) <= cliMaxName && cliIndex[base] != nil {
		return cliWord{}, false
	}
	w.i = i
	return cliWord{start, i}, true
}

// valueSpan is the part of word w from offset off (into the word) that is a value: without the
// quotes that wrap all of it; ok is false for what is not a secret (empty, a variable, a
// command substitution).
func valueSpan(s string, w cliWord, off int) (span, bool) {
	a, b := w.start+off, w.end
	if b-a >= 2 && (s[a] == '"' || s[a] == '\'') && s[b-1] == s[a] {
		a, b = a+1, b-1
	}
	if a >= b || s[a] == '$' || s[a] == '`' || strings.HasPrefix(s[a:b], "[REDACTED:") {
		return span{}, false
	}
	return span{a, b}, true
}

// afterSep is valueSpan of what follows the first sep in the word (user:SECRET).
func afterSep(s string, w cliWord, off int, sep byte) (span, bool) {
	v, ok := valueSpan(s, w, off)
	if !ok {
		return span{}, false
	}
	k := strings.IndexByte(s[v.start:v.end], sep)
	if k < 0 {
		return span{}, false
	}
	return valueSpan(s, cliWord{v.start + k + 1, v.end}, 0)
}

// glued returns the value glued to flag f in word w (-pSECRET, --user=a:b, /p:SECRET).
func (f cliFlag) glued(s string, w cliWord) (span, bool) {
	word := s[w.start:w.end]
	if len(word) <= len(f.flag) || !strings.HasPrefix(word, f.flag) {
		return span{}, false
	}
	off := len(f.flag)
	if strings.HasPrefix(f.flag, "--") {
		if word[off] != '=' {
			return span{}, false // --userx is another flag
		}
		off++
	}
	switch f.form {
	case cliGlued, cliEither:
		return valueSpan(s, w, off)
	case cliNext:
		if strings.HasPrefix(f.flag, "--") {
			return valueSpan(s, w, off) // --password=SECRET
		}
	case cliUserPass, cliUserPct:
		return afterSep(s, w, off, f.sep())
	}
	return span{}, false
}

// takesNext: flag f, alone in its word, takes the next word as its value.
func (f cliFlag) takesNext() bool {
	switch f.form {
	case cliNext, cliEither, cliUserPass, cliUserPct, cliUserComma, cliPassPrefix:
		return true
	}
	return false
}

// nextValue returns the secret in w, the word after flag f.
func (f cliFlag) nextValue(s string, w cliWord) (span, bool) {
	switch f.form {
	case cliNext, cliEither:
		if s[w.start] == '-' {
			return span{}, false // another flag: this one prompts
		}
		return valueSpan(s, w, 0)
	case cliUserPass, cliUserPct, cliUserComma:
		return afterSep(s, w, 0, f.sep())
	case cliPassPrefix:
		inner, ok := valueSpan(s, w, 0)
		if ok && strings.HasPrefix(s[inner.start:inner.end], "pass:") {
			return valueSpan(s, cliWord{inner.start + len("pass:"), inner.end}, 0)
		}
	}
	return span{}, false
}

func (f cliFlag) sep() byte {
	switch f.form {
	case cliUserPct:
		return '%'
	case cliUserComma:
		return ','
	}
	return ':'
}

// findCLI returns the secret values on the command lines in s, in order.
func findCLI(s string) []span {
	var out []span
	for i := 0; i+1 < len(s); i++ {
		if !cliWordStart(s, i) || !cliPairs.has(s[i], s[i+1]) {
			continue
		}
		p, e := cliProgramAt(s, i)
		if p == nil {
			continue
		}
		ws := &cliWords{s: s, i: e}
		out = p.find(s, ws, out)
		i = ws.i - 1 // where reading stopped: the end of the command or another program's name
	}
	return out
}

// find appends to out the secrets p's words hold, reading them up to the end of the command.
func (p *cliProgram) find(s string, ws *cliWords, out []span) []span {
	if p.sub != "" {
		for {
			w, ok := ws.next()
			if !ok {
				return out
			}
			if s[w.start] != '-' {
				if s[w.start:w.end] != p.sub {
					return out
				}
				break
			}
		}
	}
	add := func(v span, ok bool) {
		if ok {
			out = append(out, v)
		}
	}
	switch f := p.flags[0]; f.form {
	case cliKeyValue:
		secretKey := false
		for w, ok := ws.next(); ok; w, ok = ws.next() {
			if secretKey {
				add(valueSpan(s, w, 0))
				secretKey = false
				continue
			}
			name := strings.Trim(s[w.start:w.end], `"'-`)
			secretKey = secretName(name) || secretName(lastSegment(name))
		}
		return out
	case cliSlashPass:
		for w, ok := ws.next(); ok; w, ok = ws.next() {
			if s[w.start] == '-' {
				continue
			}
			if v, ok := afterSep(s, w, 0, '/'); ok {
				if at := strings.IndexByte(s[v.start:v.end], '@'); at >= 0 {
					v.end = v.start + at
				}
				add(v, v.end > v.start)
			}
			break
		}
		return out
	case cliLastWord:
		batch, seen := false, false
		var last cliWord
		for w, ok := ws.next(); ok; w, ok = ws.next() {
			if word := s[w.start:w.end]; strings.HasPrefix(word, "-") && !strings.HasPrefix(word, "--") {
				batch = batch || strings.Contains(word, f.flag)
				continue
			}
			last, seen = w, true
		}
		if batch && seen {
			add(valueSpan(s, last, 0))
		}
		return out
	}
	var pending *cliFlag // a flag waiting for its value in the next word
	for w, ok := ws.next(); ok; w, ok = ws.next() {
		if pending != nil {
			add(pending.nextValue(s, w))
			wasFlag := s[w.start] == '-'
			pending = nil
			if !wasFlag {
				continue
			}
		}
		word := s[w.start:w.end]
		if word[0] != '-' && word[0] != '/' {
			continue // every flag of the table starts so (-p, --user, /p:)
		}
		for k := range p.flags {
			f := &p.flags[k]
			if word == f.flag {
				if f.takesNext() {
					pending = f
				}
				break
			}
			if v, ok := f.glued(s, w); ok {
				add(v, true)
				break
			}
		}
	}
	return out
}

// redactCLI replaces the command-line secrets findCLI finds; found receives each.
func redactCLI(s string, found func(string)) string {
	return replaceSpans(s, findCLI(s), Marker(KindSecret), found)
}
