package output

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/shell"
)

// Fake credentials in the real shapes (none of them valid).
const (
	fakeGitHub    = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	fakeAWS       = "AKIAIOSFODNN7EXAMPLE"
	fakeGitHubPAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
	fakeGitLab    = "glpat-abcdefghij0123456789"
	fakeSlack     = "xoxb-1234567890-abcdefghij"
	fakeStripe    = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	fakeGoogle    = "AIzaSyA-1234567890abcdefghijklmnopqrstu"
	fakeAnthropic = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789-_AB"
	fakeOpenAI    = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"
	fakeOpenAIOld = "sk-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
	fakeJWT       = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)

func TestRedactFamilies(t *testing.T) {
	m := Marker
	cases := []struct{ name, in, want string }{
		{"aws", "key id " + fakeAWS + " ok", "key id " + m(KindAWSAccessKey) + " ok"},
		{"aws sts", "ASIAY34FZKBOKMUTVV7A", m(KindAWSAccessKey)},
		{"github ghp", "token=" + fakeGitHub, "token=" + m(KindGitHubToken)},
		{"github gho", "gho_0123456789abcdefghijABCDEFGHIJ012345", m(KindGitHubToken)},
		{"github ghs in url", "https://x-access-token:ghs_0123456789abcdefghijABCDEFGHIJ012345@github.com/o/r",
			"https://x-access-token:" + m(KindGitHubToken) + "@github.com/o/r"},
		{"github ghu", "ghu_0123456789abcdefghijABCDEFGHIJ012345", m(KindGitHubToken)},
		{"github ghr", "ghr_0123456789abcdefghijABCDEFGHIJ012345", m(KindGitHubToken)},
		{"github fine-grained", "pat: " + fakeGitHubPAT, "pat: " + m(KindGitHubToken)},
		{"gitlab", "using " + fakeGitLab, "using " + m(KindGitLabToken)},
		{"slack", "SLACK=" + fakeSlack, "SLACK=" + m(KindSlackToken)},
		{"slack user", "xoxp-1234567890-0987654321-abcdef", m(KindSlackToken)},
		{"stripe", "stripe " + fakeStripe + ".", "stripe " + m(KindStripeKey) + "."},
		{"stripe restricted", "rk_live_4eC39HqLyjWDarjtT1zdp7dc", m(KindStripeKey)},
		{"google", "key=" + fakeGoogle, "key=" + m(KindGoogleAPIKey)},
		{"anthropic", "ANTHROPIC=" + fakeAnthropic, "ANTHROPIC=" + m(KindAnthropicKey)},
		{"openai project", "OPENAI=" + fakeOpenAI, "OPENAI=" + m(KindOpenAIKey)},
		{"openai legacy", fakeOpenAIOld, m(KindOpenAIKey)},
		{"jwt", "cookie " + fakeJWT + " end", "cookie " + m(KindJWT) + " end"},
		{"url password", "postgres://admin:s3cr3t-pw@db:5432/app", "postgres://admin:" + m(KindURLPassword) + "@db:5432/app"},
		{"url password https", "clone https://bob:hunter2@git.example.com/r.git", "clone https://bob:" + m(KindURLPassword) + "@git.example.com/r.git"},
		{"bearer header", "Authorization: Bearer abc.def-ghi", "Authorization: Bearer " + m(KindAuthorization)},
		{"bearer header lower quoted", `-H 'authorization: bearer 0123456789'`, `-H 'authorization: bearer ` + m(KindAuthorization) + `'`},
		{"basic header", "Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic " + m(KindAuthorization)},
		{"bare bearer", "got Bearer abcdefghij0123456789xyz", "got Bearer " + m(KindAuthorization)},
		{"bearer jwt", "Authorization: Bearer " + fakeJWT, "Authorization: Bearer " + m(KindJWT)},
		{"env password", "DB_PASSWORD=hunter2x", "DB_PASSWORD=" + m(KindSecret)},
		{"env token colon", "GITHUB_TOKEN: abc123def", "GITHUB_TOKEN: " + m(KindSecret)},
		{"json secret", `{"client_secret": "xyz789", "user": "bob"}`, `{"client_secret": "` + m(KindSecret) + `", "user": "bob"}`},
		{"yaml api key", "  api_key: 'zzz999'", "  api_key: '" + m(KindSecret) + "'"},
		{"python apikey", `apiKey = "k-123456"`, `apiKey = "` + m(KindSecret) + `"`},
		{"private key name", "private_key=abcdef", "private_key=" + m(KindSecret)},
		{"aws secret", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
			"aws_secret_access_key = " + m(KindSecret)},
		{"passwd", "passwd: s3cret!", "passwd: " + m(KindSecret)},
		{"db_pass", "DB_PASS=letmein", "DB_PASS=" + m(KindSecret)},
		{"pass alone", "pass=letmein", "pass=" + m(KindSecret)},
		{"ruby arrow", `:password => "s3cret"`, `:password => "` + m(KindSecret) + `"`},
		{"go assign", `token := "abc123"`, `token := "` + m(KindSecret) + `"`},
		{"flag equals", "mysql --password=dbpass99 -u root", "mysql --password=" + m(KindSecret) + " -u root"},
		{"flag space", "cli --api-token tok_abcdef --verbose", "cli --api-token " + m(KindSecret) + " --verbose"},
		{"query string", "GET /cb?code=1&access_token=abc123&x=1", "GET /cb?code=1&access_token=" + m(KindSecret) + "&x=1"},
		{"suffix digit", "TOKEN2=abcdef", "TOKEN2=" + m(KindSecret)},
		{"two on a line", "user=bob password=aaa111 secret=bbb222", "user=bob password=" + m(KindSecret) + " secret=" + m(KindSecret)},
		{"pem one line", `"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n"`,
			`"private_key": "` + m(KindPrivateKey) + `\n"`},
		{"pem inline no name", `k = -----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END RSA PRIVATE KEY----- x`,
			`k = ` + m(KindPrivateKey) + ` x`},
		{"pem header in code", `const hdr = "-----BEGIN OPENSSH PRIVATE KEY-----"`, `const hdr = "` + m(KindPrivateKey) + `"`},
	}
	r := NewRedactor()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			// Idempotent: redacting again changes nothing.
			if got := r.Redact(tc.want); got != tc.want {
				t.Errorf("Redact(Redact(x)) = %q", got)
			}
			// The same through a collector.
			if got, _, _ := collect(t, shell.Budget{}, r, tc.in+"\n"); got != tc.want+"\n" {
				t.Errorf("collector: %q", got)
			}
		})
	}
}

func TestRedactNearMisses(t *testing.T) {
	cases := []string{
		"AKIAIOSFODNN7EXAMPL",   // 15 characters after AKIA
		"XAKIAIOSFODNN7EXAMPLE", // not at a word start
		"AKIAIOSFODNN7EXAMPLE1", // 17: not a key id
		"ghp_short",             // too short
		"ghx_0123456789abcdefghijABCDEFGHIJ012345",
		"github_pat_short",
		"glpat-abc",
		"xoxq-1234567890-abcdefghij",
		"sk_live_short",
		"pk_live_4eC39HqLyjWDarjtT1zdp7dc", // publishable: public
		"AIzaShortKey",
		"sk-ant-short",
		"pip install sk-learn scikit-learn",
		"task-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
		"sk-abcdefghij",
		"eyJhbGciOiJIUzI1NiJ9",
		"eyJhbGciOiJIUzI1NiJ9.e30", // two segments
		"http://host:8080/path",
		"ssh://git@github.com:22/org/repo",
		"http://user:@host/",
		"scp user@host:path",
		"authorization failed for user bob",
		"the bearer of bad news",
		"max_tokens=100",
		"total_tokens: 1234",
		"token_count: 5",
		"unexpected token: }",
		"token: string",
		"Token: token,",
		"password: ${DB_PASS}",
		"password=$DB_PASS",
		"password: <your password>",
		"password: ********",
		"password: null",
		"PWD=/home/u",
		"OLDPWD=/tmp/x",
		"cli --token TOKEN",
		"  --password string   password to use",
		"const token = getToken();",
		"Password: cfg.Password,",
		"compass: north",
		"bypass=12345",
		"secret_santa_list.txt",
		"password authentication failed for user \"bob\"",
		"Enter password: ",
		"keyboard: us",
		"--password-stdin",
		"TOKENIZERS_PARALLELISM=false",
		"ok  	github.com/nexus-run/nexus/internal/runtime	0.052s",
	}
	r := NewRedactor()
	for _, in := range cases {
		if got := r.Redact(in); got != in {
			t.Errorf("Redact(%q) = %q, want it unchanged", in, got)
		}
	}
}

func TestRedactPEMBlock(t *testing.T) {
	key := "-----BEGIN RSA PRIVATE KEY-----\n" +
		"Proc-Type: 4,ENCRYPTED\n" +
		"DEK-Info: AES-128-CBC,0123456789ABCDEF\n" +
		"\n" +
		"MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n" +
		"VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n" +
		"Hw==\n" +
		"-----END RSA PRIVATE KEY-----\n"
	cases := []struct{ name, in, want string }{
		{"alone", key, Marker(KindPrivateKey) + "\n"},
		{"between lines", "before\n" + key + "after\n", "before\n" + Marker(KindPrivateKey) + "\nafter\n"},
		{"openssh", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n", Marker(KindPrivateKey) + "\n"},
		{"pgp", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----\n", Marker(KindPrivateKey) + "\n"},
		{"indented yaml", "tls:\n  key: |\n    -----BEGIN EC PRIVATE KEY-----\n    MHcCAQEEIBkg\n    -----END EC PRIVATE KEY-----\nnext: 1\n",
			"tls:\n  key: |\n    " + Marker(KindPrivateKey) + "\nnext: 1\n"},
		{"text after END kept", "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY----- trailing\n", Marker(KindPrivateKey) + "\ntrailing\n"},
		{"non-body line ends the block", "-----BEGIN PRIVATE KEY-----\nMIIB\nthis is not base64, so the block ended\n",
			Marker(KindPrivateKey) + "\nthis is not base64, so the block ended\n"},
		{"no END: rest of body vanishes", "-----BEGIN PRIVATE KEY-----\nMIIB\nAAAA", Marker(KindPrivateKey) + "\n"},
		{"public key untouched", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n"},
		{"certificate untouched", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
	}
	r := NewRedactor()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, rep, _ := collect(t, shell.Budget{}, r, tc.in)
			if got != tc.want {
				t.Errorf("collector\n got %q\nwant %q", got, tc.want)
			}
			if rep.LinesKept > rep.LinesTotal {
				t.Errorf("report %+v", rep)
			}
			if got := r.Redact(tc.in); got != tc.want {
				t.Errorf("Redact\n got %q\nwant %q", got, tc.want)
			}
		})
	}
	// The block's lines count, and the marker shows them all.
	_, rep, _ := collect(t, shell.Budget{}, r, "before\n"+key+"after\n")
	if rep.LinesTotal != 10 || rep.LinesKept != 10 {
		t.Errorf("report %+v, want 10/10", rep)
	}
	// With grep, the marker line is adjacent to its neighbours (no separator).
	got, _, _ := collect(t, shell.Budget{Grep: &shell.Grep{Pattern: "REDACTED", Context: 1}}, r, "before\n"+key+"after\nz\n")
	if want := "before\n" + Marker(KindPrivateKey) + "\nafter\n"; got != want {
		t.Errorf("grep: %q, want %q", got, want)
	}
}

func TestLearn(t *testing.T) {
	cases := []struct {
		name, command string
		learned       []string // each is redacted afterwards
		notLearned    []string
	}{
		{"export", "export API_TOKEN=abc123xyz", []string{"abc123xyz"}, nil},
		{"double quoted with space", `DB_PASSWORD="p@ss w0rd" psql -h db`, []string{"p@ss w0rd"}, nil},
		{"single quoted", `export MY_SECRET='it''s-a-secret'`, []string{"its-a-secret"}, nil},
		{"backslash", `PASSWORD=abc\ def123`, []string{"abc def123"}, nil},
		{"declare", "declare -x CLIENT_SECRET=cs-0987654", []string{"cs-0987654"}, nil},
		{"local in function", "f() { local db_pass=qwerty123; }", []string{"qwerty123"}, nil},
		{"env prefix", "env GH_TOKEN=tok-zyx987 gh pr list", []string{"tok-zyx987"}, nil},
		{"docker -e", "docker run -e POSTGRES_PASSWORD=pgpass99 postgres", []string{"pgpass99"}, nil},
		{"make var", "make deploy API_KEY=zyx987abc", []string{"zyx987abc"}, nil},
		{"flag equals", "mysql --password=dbpass99 -u root", []string{"dbpass99"}, nil},
		{"flag space", "vault login --token s.abcdef123", []string{"s.abcdef123"}, nil},
		{"read here-string", "read -rs PW <<< 'sup3rsecret'", []string{"sup3rsecret"}, nil},
		{"read secret var", `read API_KEY <<< "k-77665544"`, []string{"k-77665544"}, nil},
		{"echo into password-stdin", "echo 'hunter2hunter2' | docker login -u me --password-stdin", []string{"hunter2hunter2"}, nil},
		{"url password", "git clone https://bob:gitpw12345@example.com/r.git", []string{"gitpw12345"}, nil},
		{"authorization", `curl -H "Authorization: Bearer tok.en.123456789"`, []string{"tok.en.123456789"}, nil},
		{"json in command", `curl -d '{"password":"jsonpw123"}' https://x`, []string{"jsonpw123"}, nil},
		{"value suffix", "export MY_SECRET_VALUE=correcthorse", []string{"correcthorse"}, nil},
		{"dynamic not learned", `export TOKEN=$(cat token.txt); PASSWORD="$OTHER"; KEY_SECRET=${X}; T_TOKEN=` + "`cat f`", nil, []string{"cat token.txt", "$OTHER"}},
		{"short not learned", "PASSWORD=abc12", nil, []string{"abc12"}},
		{"not secret names", "export PATH=/usr/local/bin:/usr/bin FOO=barbazqux HOME=/home/user", nil, []string{"barbazqux", "/home/user"}},
		{"plain echo not learned", "echo hello-world-123 | wc -c", nil, []string{"hello-world-123"}},
		{"read without secret", "read NAME <<< 'somebody1'", nil, []string{"somebody1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRedactor()
			r.Learn(tc.command)
			for _, v := range tc.learned {
				out := "later the program printed " + v + " again"
				if got := r.Redact(out); strings.Contains(got, v) || !strings.Contains(got, "[REDACTED:") {
					t.Errorf("after Learn(%q), Redact(%q) = %q", tc.command, out, got)
				}
				got, _, _ := collect(t, shell.Budget{}, r, out+"\n")
				if strings.Contains(got, v) {
					t.Errorf("collector kept %q: %q", v, got)
				}
				if rc := r.Redact(tc.command); strings.Contains(rc, v) {
					t.Errorf("Redact(command) = %q still has %q", rc, v)
				}
			}
			for _, v := range tc.notLearned {
				out := "x " + v + " y"
				if got := r.Redact(out); got != out {
					t.Errorf("after Learn(%q), Redact(%q) = %q", tc.command, out, got)
				}
			}
			if len(tc.learned) == 0 && r.Learned() != 0 {
				t.Errorf("learned %d literals", r.Learned())
			}
		})
	}
}

func TestLearnedLiteralInsideText(t *testing.T) {
	r := NewRedactor()
	r.Learn("export SERVICE_PASSWORD=Tr0ub4dor&3") // & ends the word: the literal is Tr0ub4dor
	r.Learn("export OTHER_TOKEN='Tr0ub4dor&3xyz'")
	got := r.Redact("a=Tr0ub4dor&3xyz b=xxTr0ub4dorxx")
	want := "a=" + Marker(KindLearned) + " b=xx" + Marker(KindLearned) + "xx"
	if got != want {
		t.Errorf("got %q, want %q (the longer literal wins where both match)", got, want)
	}
}

func TestLearnBounded(t *testing.T) {
	r := NewRedactor()
	for i := range maxLearned + 10 {
		r.Learn(fmt.Sprintf("export T%d_TOKEN=value-%06d", i, i))
	}
	if r.Learned() != maxLearned {
		t.Fatalf("learned %d, want %d", r.Learned(), maxLearned)
	}
	if got := r.Redact("value-000000"); got != "value-000000" {
		t.Errorf("oldest literal still redacted: %q", got)
	}
	last := fmt.Sprintf("value-%06d", maxLearned+9)
	if got := r.Redact(last); got != Marker(KindLearned) {
		t.Errorf("newest literal not redacted: %q", got)
	}
}

// TestRedactorConcurrent: Learn and Redact from many goroutines (run with -race).
func TestRedactorConcurrent(t *testing.T) {
	r := NewRedactor()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				v := fmt.Sprintf("secret-%d-%d", g, i)
				r.Learn("export X_TOKEN=" + v)
				if got := r.Redact("v=" + v); strings.Contains(got, v) {
					t.Errorf("not redacted: %q", got)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestLearnLiteral(t *testing.T) {
	r := NewRedactor()
	r.LearnLiteral("p w,(x)", "ab", "multi\nline")
	if got := r.Redact("login with p w,(x) ok ab"); got != "login with "+Marker(KindLearned)+" ok ab" {
		t.Errorf("got %q", got)
	}
	if r.Learned() != 1 {
		t.Errorf("learned %d", r.Learned())
	}
}
