package output

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/shell"
)

// buildLog is typical build/test output: coloured status lines, paths, timings.
func buildLog() []byte {
	lines := []string{
		"\x1b[32mok\x1b[0m  \tgithub.com/nexus-run/nexus/internal/runtime\t0.052s\n",
		"--- PASS: TestSomethingInteresting (0.00s)\n",
		"internal/shell/engine.go:123:45: undefined: frobnicate\n",
		"npm WARN deprecated inflight@1.0.6: This module is not supported, and leaks memory.\n",
		"   Compiling serde v1.0.197\n",
		"[  42%] Building CXX object src/CMakeFiles/app.dir/main.cpp.o\n",
		"Downloading https://files.pythonhosted.org/packages/ab/cd/requests-2.31.0-py3-none-any.whl (62 kB)\n",
		"  \x1b[1m\x1b[31merror\x1b[0m: could not find `Cargo.toml` in `/home/user/project` or any parent directory\n",
	}
	return repeatLines(lines)
}

// repeatLines repeats lines to 1 MiB.
func repeatLines(lines []string) []byte {
	var b strings.Builder
	for b.Len() < 1<<20 {
		for _, l := range lines {
			b.WriteString(l)
		}
	}
	return []byte(b.String())
}

// mixedLog is what else agents read: structured logs with escaped JSON inside, prose, shell
// history with the programs the command-line rules know (none with a password), URLs with
// query strings.
func mixedLog() []byte {
	lines := []string{
		`{"level":"info","ts":"2026-01-02T03:04:05Z","msg":"request done","path":"/api/v1/users?page=2&per_page=50","status":200,"duration_ms":12}` + "\n",
		`{"log":"GET /healthz 200\n","stream":"stdout","time":"2026-01-02T03:04:05.123456789Z"}` + "\n",
		"The quick brown fox jumps over the lazy dog; then it reads the documentation about passwords and tokens.\n",
		"Redis is an in-memory data store used by millions of developers as a cache, vector database, document database.\n",
		"$ docker run -p 8080:80 -v /srv:/srv --rm nginx:1.27 && curl -sSL https://example.com/install.sh -o install.sh\n",
		"$ mysql -u root -h db.internal -e 'show databases' ; zip -r out.zip src/ ; openssl x509 -in cert.pem -noout -text\n",
		"2026/01/02 03:04:05 redirect to https://login.example.com/authorize?client_id=abc&redirect_uri=https%3A%2F%2Fapp%2Fcb&state=xyz\n",
		"    at Object.<anonymous> (/home/user/project/node_modules/some-package/lib/index.js:42:17)\n",
	}
	return repeatLines(lines)
}

func BenchmarkCollector(b *testing.B) {
	build, mixed := buildLog(), mixedLog()
	for _, bc := range []struct {
		name string
		in   []byte
		b    shell.Budget
	}{
		{"all", build, shell.Budget{}},
		{"tail", build, shell.Budget{Keep: "tail", Lines: 100}},
		{"grep", build, shell.Budget{Grep: &shell.Grep{Pattern: `error|FAIL`, Context: 2}}},
		{"mixed", mixed, shell.Budget{}},
	} {
		in := bc.in
		b.Run(bc.name, func(b *testing.B) {
			r := NewRedactor()
			r.Learn("export API_TOKEN=abc123xyz")
			b.SetBytes(int64(len(in)))
			cpu0 := cpuTime()
			for b.Loop() {
				c, _ := NewCollector(bc.b, r)
				for i := 0; i < len(in); i += 32 << 10 {
					_, _ = c.Write(in[i:min(i+32<<10, len(in))])
				}
				c.Finish()
			}
			reportCPU(b, cpu0, len(in))
		})
	}
}

func BenchmarkRedactLine(b *testing.B) {
	r := NewRedactor()
	r.Learn("export API_TOKEN=abc123xyz")
	for _, bc := range []struct{ name, line string }{
		{"plain", "internal/shell/engine.go:123:45: undefined: frobnicate"},
		{"url", "Downloading https://files.pythonhosted.org/packages/ab/cd/requests-2.31.0-py3-none-any.whl (62 kB)"},
		{"name-value", "ok   github.com/nexus-run/nexus/internal/pkg/some/path\t0.052s token=abc123"},
		{"github-token", "remote: using " + fakeGitHub + " for push"},
		{"json-log", `{"level":"info","msg":"request done","path":"/api/v1/users?page=2","status":200,"duration_ms":12}`},
		{"prose", "The quick brown fox jumps over the lazy dog; then it reads the documentation about passwords."},
		{"command", "docker run -p 8080:80 --rm nginx:1.27 && curl -sSL https://example.com/install.sh -o install.sh"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.line)))
			cpu0 := cpuTime()
			for b.Loop() {
				r.redactLine(bc.line, nil)
			}
			reportCPU(b, cpu0, len(bc.line))
		})
	}
}

// cpuTime is the process's CPU time (user+system, all threads). On a loaded machine the
// wall-clock MB/s is noisy; cpu-MB/s (bytes per CPU second, GC included) is not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, cpu0 time.Duration, n int) {
	b.Helper()
	if d := cpuTime() - cpu0; d > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/1e6/d.Seconds(), "cpu-MB/s")
	}
}
