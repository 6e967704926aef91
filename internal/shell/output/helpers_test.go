package output

import (
	"testing"

	"github.com/nexus-run/nexus/internal/shell"
)

// collectChunked feeds in in chunks of n bytes.
func collectChunked(t testing.TB, b shell.Budget, r *Redactor, in string, n int) string {
	t.Helper()
	c, err := NewCollector(b, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(in); i += n {
		if _, err := c.Write([]byte(in[i:min(i+n, len(in))])); err != nil {
			t.Fatal(err)
		}
	}
	text, _, _ := c.Finish()
	return text
}

func mustWrite(t testing.TB, c *Collector, p []byte) {
	t.Helper()
	if _, err := c.Write(p); err != nil {
		t.Fatal(err)
	}
}
