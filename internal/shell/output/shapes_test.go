package output

import (
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/shell"
)

// redactionCase is one input and what redaction must make of it, through Redact and through a
// collector fed in every way.
type redactionCase struct{ name, in, want string }

// same is a case redaction must leave alone.
func same(name, in string) redactionCase { return redactionCase{name, in, in} }

// checkRedaction runs the cases through Redact (and again, idempotent) and through a
// collector fed whole, split at every byte, and one byte at a time: a secret split across
// writes must be caught the same way.
func checkRedaction(t *testing.T, cases []redactionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRedactor()
			if got := r.Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			if got := r.Redact(tc.want); got != tc.want {
				t.Errorf("Redact is not idempotent: %q", got)
			}
			in, want := tc.in+"\n", tc.want+"\n"
			if got := collectChunked(t, shell.Budget{}, r, in, 1); got != want {
				t.Errorf("collector, one byte at a time\n got %q\nwant %q", got, want)
			}
			for p := 1; p < len(in); p++ {
				c, err := NewCollector(shell.Budget{}, r)
				if err != nil {
					t.Fatal(err)
				}
				mustWrite(t, c, []byte(in[:p]))
				mustWrite(t, c, []byte(in[p:]))
				if got, _, _ := c.Finish(); got != want {
					t.Fatalf("collector, split at %d (%q | %q)\n got %q\nwant %q", p, in[:p], in[p:], got, want)
				}
			}
		})
	}
}

// TestRedactTokenBoundaries: a token shape starts after any byte that is not a letter or
// digit, after an escape that encodes a separator, and after a percent-encoding; not after a
// letter or digit.
func TestRedactTokenBoundaries(t *testing.T) {
	m := Marker
	gh, oa := m(KindGitHubToken), m(KindOpenAIKey)
	checkRedaction(t, []redactionCase{
		{"escaped newline in a JSON string", `{"n":"line\n` + fakeGitHub + `"}`, `{"n":"line\n` + gh + `"}`},
		{"escaped tab", `"a\t` + fakeGitHub + `"`, `"a\t` + gh + `"`},
		{"escaped carriage return", `x\r` + fakeOpenAI, `x\r` + oa},
		{"escaped NUL", `x\0` + fakeOpenAI, `x\0` + oa},
		{"octal escape", `x\012` + fakeGitHub, `x\012` + gh},
		{"hex escape", `x\x0a` + fakeGitHub, `x\x0a` + gh},
		{"unicode escape", `x\u000a` + fakeGitHub, `x\u000a` + gh},
		{"unicode escape upper", `x\u000A` + fakeSlack, `x\u000A` + m(KindSlackToken)},
		{"URL-encoded newline", "q=a%0A" + fakeOpenAI, "q=a%0A" + oa},
		{"URL-encoded lower case", "q=a%0a" + fakeAnthropic, "q=a%0a" + m(KindAnthropicKey)},
		{"URL-encoded space", "q=x%20" + fakeGitLab, "q=x%20" + m(KindGitLabToken)},
		{"glued to a word by _", "id_" + fakeGitHub, "id_" + gh},
		{"glued by -", "token-" + fakeStripe, "token-" + m(KindStripeKey)},
		{"glued by .", "a." + fakeJWT, "a." + m(KindJWT)},
		{"after a path slash", "/run/" + fakeAWS, "/run/" + m(KindAWSAccessKey)},
		{"AWS after an escaped newline", `"\n` + fakeAWS + `"`, `"\n` + m(KindAWSAccessKey) + `"`},
		{"Google after %0A", "k=%0A" + fakeGoogle, "k=%0A" + m(KindGoogleAPIKey)},
		{"JWT after an escape", `"\n` + fakeJWT, `"\n` + m(KindJWT)},
		{"two tokens across an escape", fakeGitHub + `\n` + fakeGitHub, gh + `\n` + gh},
		{"Authorization after an escaped newline", `{"h":"x\nAuthorization: Bearer abc.def-ghi"}`, `{"h":"x\nAuthorization: Bearer ` + m(KindAuthorization) + `"}`},
		{"bare bearer after _", "x_Bearer abcdefghij0123456789xyz", "x_Bearer " + m(KindAuthorization)},
		{"URL password after _", "id_https://bob:hunter2@h/x", "id_https://bob:" + m(KindURLPassword) + "@h/x"},
		// Not a token start: glued to a letter or a digit.
		{"glued to a letter", "x" + fakeGitHub, "x" + fakeGitHub},
		{"glued to a digit", "9" + fakeOpenAI, "9" + fakeOpenAI},
		same("inside a word", "task-abcdefghijklmnopqrstuvwxyz0123456789ABCD"),
		same("a percent that is no encoding", "100%sk-abc"),
	})
}

// TestRedactNameValueEncodings: name/value pairs written inside JSON strings, with the value
// after an escaped or a real line break, and URL-encoded.
func TestRedactNameValueEncodings(t *testing.T) {
	s := Marker(KindSecret)
	checkRedaction(t, []redactionCase{
		{"JSON in a JSON string", `{"body":"{\"password\": \"hunter2x\", \"user\": \"bob\"}"}`,
			`{"body":"{\"password\": \"` + s + `\", \"user\": \"bob\"}"}`},
		{"value after an escaped newline", `{"log":"password:\nhunter2hunter2"}`, `{"log":"password:\n` + s + `"}`},
		{"value after an escaped tab", `{"log":"api_key=\tzz99yy88"}`, `{"log":"api_key=\t` + s + `"}`},
		{"bare value ends at an escaped newline", `{"log":"token=abc123\nnext line"}`, `{"log":"token=` + s + `\nnext line"}`},
		{"URL-encoded", "data=password%3Dhunter2%26user%3Dbob", "data=password%3D" + s + "%26user%3Dbob"},
		{"URL-encoded colon", "x=client_secret%3Aabc123def%20y", "x=client_secret%3A" + s + "%20y"},
		{"URL-encoded JSON", "d=%7B%22token%22%3A%22abc123%22%7D", "d=%7B%22token%22%3A%22" + s + "%22%7D"},
		// What the name/value rules leave.
		same("escaped placeholder", `{"t":"token:\n$TOKEN"}`),
	})
}

// TestRedactValueOnTheNextLine: a key with nothing after its colon, then its value alone on
// the next line; a YAML block scalar under a secret-looking key.
func TestRedactValueOnTheNextLine(t *testing.T) {
	s := Marker(KindSecret)
	checkRedaction(t, []redactionCase{
		{"YAML", "db:\n  password:\n    hunter2hunter2\n  user: bob", "db:\n  password:\n    " + s + "\n  user: bob"},
		{"flush left", "token:\nabc123xyz", "token:\n" + s},
		{"quoted", "api_key:\n  'zzz999'", "api_key:\n  '" + s + "'"},
		{"pretty JSON", "{\n  \"client_secret\":\n    \"abc123xyz\",\n  \"user\": \"bob\"\n}",
			"{\n  \"client_secret\":\n    \"" + s + "\",\n  \"user\": \"bob\"\n}"},
		{"list item key", "- password:\n  hunter2hunter2", "- password:\n  " + s},
		{"block scalar", "private_key: |\n  line-one-abc\n\n  line-two-def\nnext: 1", "private_key: |\n  " + s + "\n\n  " + s + "\nnext: 1"},
		{"folded block, indented key", "  secret: >-\n    part one\n    part two\n  other: x", "  secret: >-\n    " + s + "\n    " + s + "\n  other: x"},
		// Left alone: a nested map, a list, a prompt, a reference, a blank line between.
		same("nested map", "password:\n  type: string\n  minLength: 8"),
		same("list", "tokens:\n- first one"),
		same("prompt", "Enter password:\nIncorrect"),
		same("reference", "password:\n  ${DB_PASS}"),
		same("blank line between", "token:\n\nabc123xyz"),
		same("not a secret name", "username:\n  alice123"),
	})
}

// TestRedactCommandLinePasswords: programs that take a password as an argument.
func TestRedactCommandLinePasswords(t *testing.T) {
	s := Marker(KindSecret)
	checkRedaction(t, []redactionCase{
		{"mysql -p glued", "mysql -uroot -pS3cretPW appdb", "mysql -uroot -p" + s + " appdb"},
		{"mysql quoted", "mysql -u root -p'my pw' appdb", "mysql -u root -p'" + s + "' appdb"},
		{"mysqldump by path under sudo", "sudo /usr/bin/mysqldump -pS3cret x > d.sql", "sudo /usr/bin/mysqldump -p" + s + " x > d.sql"},
		{"mariadb in ps output", "  4242 pts/1    S+     0:00 mariadb -h db -pS3cret", "  4242 pts/1    S+     0:00 mariadb -h db -p" + s},
		{"curl -u", "curl -u admin:PASSw0rd https://x", "curl -u admin:" + s + " https://x"},
		{"curl -u glued", "curl -sS -uadmin:PASSw0rd https://x", "curl -sS -uadmin:" + s + " https://x"},
		{"curl --user quoted", `curl --user "admin:p w" https://x`, `curl --user "admin:` + s + `" https://x`},
		{"curl proxy user", "curl -U proxy:pp1234 https://x", "curl -U proxy:" + s + " https://x"},
		{"curl in a pipeline", "echo x | curl -u a:b3cd3f https://x; ls", "echo x | curl -u a:" + s + " https://x; ls"},
		{"sshpass", "sshpass -p hunter22 ssh host", "sshpass -p " + s + " ssh host"},
		{"sshpass glued", "sshpass -phunter22 ssh host", "sshpass -p" + s + " ssh host"},
		{"redis-cli", "redis-cli -h r -a hunter22 ping", "redis-cli -h r -a " + s + " ping"},
		{"smbclient", "smbclient //srv/share -U alice%hunter22", "smbclient //srv/share -U alice%" + s},
		{"ldapsearch", "ldapsearch -x -D cn=admin -w hunter22 -b dc=x", "ldapsearch -x -D cn=admin -w " + s + " -b dc=x"},
		{"zip", "zip -P hunter22 -r a.zip .", "zip -P " + s + " -r a.zip ."},
		{"7z", "7z x -phunter22 a.7z", "7z x -p" + s + " a.7z"},
		{"openssl pass:", "openssl enc -aes256 -pass pass:hunter22 -in x", "openssl enc -aes256 -pass pass:" + s + " -in x"},
		{"openssl env: is a name", "openssl pkcs12 -passin env:PW -passout pass:hunter22", "openssl pkcs12 -passin env:PW -passout pass:" + s},
		{"keytool", "keytool -importkeystore -srcstorepass hunter22 -deststorepass hunter33", "keytool -importkeystore -srcstorepass " + s + " -deststorepass " + s},
		{"mongosh", "mongosh -u admin -p hunter22 mongodb://h", "mongosh -u admin -p " + s + " mongodb://h"},
		{"sqlcmd", "sqlcmd -S srv -U sa -P hunter22", "sqlcmd -S srv -U sa -P " + s},
		{"docker login", "docker login -u me -p hunter22 registry.io", "docker login -u me -p " + s + " registry.io"},
		{"skopeo", "skopeo copy --creds me:hunter22 docker://a docker://b", "skopeo copy --creds me:" + s + " docker://a docker://b"},
		{"xfreerdp", "xfreerdp /u:admin /p:hunter22 /v:host", "xfreerdp /u:admin /p:" + s + " /v:host"},
		{"lftp", "lftp -u alice,hunter22 ftp.example.com", "lftp -u alice," + s + " ftp.example.com"},
		{"ssh-keygen", "ssh-keygen -t ed25519 -N hunter22 -f k", "ssh-keygen -t ed25519 -N " + s + " -f k"},
		{"snmpwalk", "snmpwalk -v3 -u u -A authpass1 -X privpass1 host", "snmpwalk -v3 -u u -A " + s + " -X " + s + " host"},
		{"plink", "plink -pw hunter22 host", "plink -pw " + s + " host"},
		{"sqlplus", "sqlplus -s scott/tiger123@orcl", "sqlplus -s scott/" + s + "@orcl"},
		{"htpasswd", "htpasswd -b -c .htpasswd alice hunter22", "htpasswd -b -c .htpasswd alice " + s},
		{"aws configure set", "aws configure set aws_secret_access_key wJalrXUtnFEMI", "aws configure set aws_secret_access_key " + s},
		{"nmcli", "nmcli dev wifi connect Home password hunter22", "nmcli dev wifi connect Home password " + s},
		{"git config", "git config --global user.password hunter22", "git config --global user.password " + s},
		{"a program after another", "sshpass -p hunter22 ssh db1 mysql -pS3cret x", "sshpass -p " + s + " ssh db1 mysql -p" + s + " x"},
		{"a command in quotes", `ssh db1 "mysql -uroot -pS3cret -e 'show tables'"`, `ssh db1 "mysql -uroot -p` + s + ` -e 'show tables'"`},
		{"two commands", "mysql -pS3cret a; curl -u a:b3cd3f x && 7z x -phunter22 y", "mysql -p" + s + " a; curl -u a:" + s + " x && 7z x -p" + s + " y"},
		// Left alone.
		same("mysql -p prompts", "mysql -u root -p appdb"),
		same("curl without a password", "curl -u admin https://x"),
		same("docker run -p is a port", "docker run -p 8080:80 nginx"),
		same("ssh -p is a port", "ssh -p 22 host"),
		same("a variable", "sshpass -p $PW ssh host"),
		same("prose", "net income rose; the zip format is old"),
		same("mkdir -p", "mkdir -p /tmp/x && cd /tmp/x"),
	})
}

// TestLearnCommandLinePasswords: a password given on a command line is learned, so the
// program's own output that repeats it is redacted.
func TestLearnCommandLinePasswords(t *testing.T) {
	for _, tc := range []struct{ command, secret string }{
		{"mysql -uroot -pS3cretPW appdb", "S3cretPW"},
		{"curl -u admin:PASSw0rd https://x", "PASSw0rd"},
		{"sshpass -p 'hunter 22' ssh host", "hunter 22"},
	} {
		r := NewRedactor()
		r.Learn(tc.command)
		if got := r.Redact("echo: " + tc.secret + " was used"); strings.Contains(got, tc.secret) {
			t.Errorf("after Learn(%q): %q", tc.command, got)
		}
	}
}
