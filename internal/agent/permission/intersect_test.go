package permission

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestStricter(t *testing.T) {
	for _, tc := range []struct{ a, b, want Level }{
		{YOLO, Trusted, Trusted},
		{Trusted, YOLO, Trusted},
		{YOLO, Sandboxed, Sandboxed},
		{Sandboxed, Trusted, Sandboxed},
		{YOLO, YOLO, YOLO},
	} {
		if got := Stricter(tc.a, tc.b); got != tc.want {
			t.Errorf("Stricter(%s, %s) = %s, want %s", tc.a, tc.b, got, tc.want)
		}
		if !tc.a.Allows(tc.want) || !tc.b.Allows(tc.want) {
			t.Errorf("%s or %s does not allow %s", tc.a, tc.b, tc.want)
		}
	}
	if Sandboxed.Allows(Trusted) || Trusted.Allows(YOLO) {
		t.Error("a stricter level allows a wider one")
	}
}

func TestIntersectPaths(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(ws, "data", "sub"), 0o700))
	// data/link leads outside: an entry under it is compared where it leads.
	must(t, os.Symlink(outside, filepath.Join(ws, "data", "link")))
	outside, _ = filepath.EvalSymlinks(outside)
	wsr, _ := filepath.EvalSymlinks(ws)
	for _, tc := range []struct {
		name string
		a, b []string
		want []string
	}{
		{"one holds the other", []string{"data"}, []string{filepath.Join(ws, "data", "sub")}, []string{filepath.Join(wsr, "data", "sub")}},
		{"either order", []string{"data/sub"}, []string{"data"}, []string{filepath.Join(wsr, "data", "sub")}},
		{"disjoint", []string{"data/sub"}, []string{"/etc"}, nil},
		{"one side empty", []string{"data"}, nil, nil},
		{"the same", []string{"/srv/x"}, []string{"/srv/x/"}, []string{"/srv/x"}},
		{"a link does not widen", []string{"data"}, []string{"data/link"}, nil},
		{"a link's target", []string{outside}, []string{"data/link/f"}, []string{filepath.Join(outside, "f")}},
	} {
		got := IntersectPaths(ws, tc.a, tc.b)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: IntersectPaths(%q, %q) = %q, want %q", tc.name, tc.a, tc.b, got, tc.want)
		}
	}
	if got := UnionPaths(ws, []string{"a", "/b"}, []string{"/b", "c/../d"}); !slices.Equal(got, []string{filepath.Join(ws, "a"), "/b", filepath.Join(ws, "d")}) {
		t.Errorf("UnionPaths = %q", got)
	}
}
