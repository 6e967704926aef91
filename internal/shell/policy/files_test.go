package policy

import (
	"fmt"
	"slices"
	"testing"
)

// Inspect reports every redirection that opens a file, with what the text fixes of its path,
// wherever it sits (substitutions, shell strings, function bodies), and the programs by the
// name the command gives them.
func TestInspectRedirects(t *testing.T) {
	cases := []struct {
		cmd  string
		want []string // "w:/path" or "r:/path" when static, "w?prefix" or "r?prefix" when not
	}{
		{`echo hi > $OUT/f`, []string{"w?"}},
		{`echo hi >> /tmp/outside`, []string{"w:/tmp/outside"}},
		{`cat < /etc/passwd`, []string{"r:/etc/passwd"}},
		{`x="$(</etc/shadow)"`, []string{"r:/etc/shadow"}},
		{`echo > "$VAR"`, []string{"w?"}},
		{`echo hi > ./inside.txt`, []string{"w:./inside.txt"}},
		{`echo hi &> a; echo hi &>> b; echo >| c; cat <> d; echo >& e`, []string{"w:a", "w:b", "w:c", "w:d", "w:e"}},
		{`echo hi 2>&1 >&2 3>&- 4<&0 5>&1-`, nil},
		{`cat <<< hi; cat <<EOF` + "\nx\nEOF", nil},
		{`cat < <(echo hi)`, nil},
		{`cat <(cat < /a) >(tee > /b)`, []string{"r:/a", "w:/b"}},
		{`echo > ~/x`, []string{"w?~/x"}},
		{`echo > '~/x'`, []string{"w:~/x"}},
		{`echo > /tmp/*.txt`, []string{"w?/tmp/"}},
		{`echo > "/tmp/$x"`, []string{"w?/tmp/"}},
		{`bash -c 'echo > /tmp/x'`, []string{"w:/tmp/x"}},
		{`f() { cat < /etc/x; }`, []string{"r:/etc/x"}},
		{`echo >&$fd`, []string{"w?"}},
		{`exec 3< /etc/passwd`, []string{"r:/etc/passwd"}},
		{"cat <<EOF\n$(< /etc/passwd)\nEOF", []string{"r:/etc/passwd"}},
	}
	for _, tc := range cases {
		rep, err := Inspect(tc.cmd)
		if err != nil && tc.cmd != `echo >&$fd` { // a descriptor by data is a reserved-name violation
			t.Errorf("Inspect(%q): %v", tc.cmd, err)
		}
		var got []string
		for _, r := range rep.Redirects {
			mode := "r"
			if r.Write {
				mode = "w"
			}
			if r.Static {
				got = append(got, mode+":"+r.Path)
			} else {
				got = append(got, mode+"?"+r.Prefix)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Inspect(%q).Redirects = %q, want %q", tc.cmd, got, tc.want)
		}
	}
}

func TestInspectProgramsAndArgs(t *testing.T) {
	rep, err := Inspect(`./bin/echo hi && sudo /usr/bin/cat -- "$f" /etc/x* && cd /tmp`)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rep.Programs); got != "[{./bin/echo echo} {sudo sudo} {/usr/bin/cat cat} {cd cd}]" {
		t.Errorf("programs %s", got)
	}
	var args []string
	for _, a := range rep.Args {
		if a.Static {
			args = append(args, a.Path)
		} else {
			args = append(args, "?"+a.Prefix)
		}
	}
	if want := []string{"hi", "/usr/bin/cat", "--", "?/etc/x", "/tmp"}; !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	if !rep.ChangesDir {
		t.Error("cd not seen")
	}
	// The lists still match base names: Programs is unchanged.
	if names, _ := Programs(`./bin/echo hi`); !slices.Equal(names, []string{"echo"}) {
		t.Errorf("Programs = %v", names)
	}
}
