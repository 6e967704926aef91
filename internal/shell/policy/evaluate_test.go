package policy

import (
	"strings"
	"testing"
)

// evaluated are commands in which bash evaluates a word arithmetically (or
// as a variable reference) whose value the text does not show, or which
// reach the session's own state. Each one ran a command hidden in a
// variable's value, or could, before these rules; with a list set, each must
// be refused with the rule given.
var evaluated = []struct{ cmd, rule string }{
	// The examples of the hardening issue.
	{"x='a[$(rm victim)]'; echo $((x))", RuleArithmetic},
	{"printf -v 'a[$(rm v)]' x", RuleArithmetic},
	{"test -v 'a[$(rm v)]'", RuleArithmetic},
	{": $((x))", RuleArithmetic},
	{"[[ $x -eq 0 ]]", RuleArithmetic},
	{"declare -i n; n=y", RuleArithmetic},
	// Arithmetic expansion and commands.
	{"echo $((x+1))", RuleArithmetic},
	{"echo $(($x))", RuleArithmetic},
	{"echo $((${x}))", RuleArithmetic},
	{"echo \"$((x))\"", RuleArithmetic},
	{"echo $[x]", RuleArithmetic},
	{"echo $((a[1]))", RuleArithmetic},
	{"echo $(( $(cat f) ))", RuleArithmetic},
	{"echo $(( `cat f` ))", RuleArithmetic},
	{"echo $((1 ? x : 2))", RuleArithmetic},
	{"echo $(( -x ))", RuleArithmetic},
	{"(( x ))", RuleArithmetic},
	{"((x=1))", RuleArithmetic},
	{"(( i++ ))", RuleArithmetic},
	{"for ((i=0;i<3;i++)); do :; done", RuleArithmetic},
	{"for ((;;x)); do :; done", RuleArithmetic},
	{"let x=1", RuleArithmetic},
	{"let 1+x", RuleArithmetic},
	{"let \"$x\"", RuleArithmetic},
	{"builtin let 1+x", RuleArithmetic},
	{"cat <<EOF\n$((x))\nEOF", RuleArithmetic},
	{"eval 'echo $((x))'", RuleArithmetic},
	{"bash -c 'echo $((x))'", RuleArithmetic},
	// [[ ]] arithmetic comparisons and -v.
	{"[[ x -eq 0 ]]", RuleArithmetic},
	{"[[ 0 -ne $x ]]", RuleArithmetic},
	{"[[ $x -lt 1 ]]", RuleArithmetic},
	{"[[ $x -le 1 ]]", RuleArithmetic},
	{"[[ $x -gt 1 ]]", RuleArithmetic},
	{"[[ $x -ge 1 ]]", RuleArithmetic},
	{"[[ $1 -eq 1 ]]", RuleArithmetic},
	{"[[ \"$x\" -eq 1 ]]", RuleArithmetic},
	{"[[ -n y && ( 1 -eq $x ) ]]", RuleArithmetic},
	{"[[ -v $x ]]", RuleArithmetic},
	{"[[ -v 'a[$(rm v)]' ]]", RuleArithmetic},
	{"[[ -v a[x] ]]", RuleArithmetic},
	// test / [ -v, and operators that may come from data.
	{"[ -v 'a[x]' ]", RuleArithmetic},
	{"test -v \"$x\"", RuleArithmetic},
	{"test \"$op\" 'a[x]'", RuleArithmetic},
	{"test \"$op\" \"$x\"", RuleArithmetic},
	{"[ $x ]", RuleArithmetic},
	{"test $x", RuleArithmetic},
	{"[ -f $f ]", RuleArithmetic},
	{"test -n \"$@\"", RuleArithmetic},
	{"[ -e * ]", RuleArithmetic},
	{"/usr/bin/test -v 'a[x]'", RuleArithmetic},
	{"builtin test -v 'a[x]'", RuleArithmetic},
	// Integer and name-reference attributes.
	{"declare -i n", RuleArithmetic},
	{"typeset -i n=1", RuleArithmetic},
	{"f() { local -i n; }", RuleArithmetic},
	{"declare -ai a", RuleArithmetic},
	{"declare -gi n", RuleArithmetic},
	{"declare -n r=x", RuleArithmetic},
	{"declare -n r", RuleArithmetic},
	{"f() { local -n r=$1; }", RuleArithmetic},
	{"typeset -n r", RuleArithmetic},
	{"builtin declare -i n", RuleArithmetic},
	{"command declare -n r=x", RuleArithmetic},
	{"eval 'declare -i n'", RuleArithmetic},
	// Subscripts of assignments and declarations.
	{"a[x]=1", RuleArithmetic},
	{"a[$i]=1", RuleArithmetic},
	{"a=([x]=1)", RuleArithmetic},
	{"a+=([x]=1)", RuleArithmetic},
	{"m[key]=1", RuleArithmetic},
	{"declare a[x]=1", RuleArithmetic},
	{"declare 'a[$(rm v)]=1'", RuleArithmetic},
	{"declare 'a[1=$(rm v)]=1'", RuleArithmetic},
	{"f() { local 'a[x]'; }", RuleArithmetic},
	{"export 'a[x]=1'", RuleArithmetic},
	{"readonly 'a[x]'", RuleArithmetic},
	{"declare \"$x\"", RuleArithmetic},
	{"export \"$x\"", RuleArithmetic},
	// A value declare evaluates as an array assignment.
	{"declare a=$x", RuleArithmetic},
	{"declare -a a=\"$x\"", RuleArithmetic},
	{"typeset a=$(cat f)", RuleArithmetic},
	{"f() { local x=\"$1\"; }", RuleArithmetic},
	{"builtin declare a=$x", RuleArithmetic},
	{"readonly -a r=$x", RuleArithmetic},
	{"export -a r=\"$x\"", RuleArithmetic},
	// Parameter expansions.
	{"echo ${a[x]}", RuleArithmetic},
	{"echo ${a[$i]}", RuleArithmetic},
	{"echo \"${a[i+1]}\"", RuleArithmetic},
	{"echo ${#a[x]}", RuleArithmetic},
	{"echo ${x:off}", RuleArithmetic},
	{"echo ${x:$o:1}", RuleArithmetic},
	{"echo ${x:0:$n}", RuleArithmetic},
	{"echo ${a[@]:x}", RuleArithmetic},
	{"echo ${!x}", RuleArithmetic},
	{"echo ${!x[0]}", RuleArithmetic},
	{"echo ${!x:-y}", RuleArithmetic},
	{"echo ${OPTIND:=$x}", RuleArithmetic},
	// unset, printf -v, read, mapfile, getopts, wait -p, {fd} redirections.
	{"unset 'a[x]'", RuleArithmetic},
	{"unset a[$i]", RuleArithmetic},
	{"unset \"$x\"", RuleArithmetic},
	{"unset -v 'a[$(rm v)]'", RuleArithmetic},
	{"printf -v \"$n\" x", RuleArithmetic},
	{"printf -va[x] y", RuleArithmetic},
	{"printf \"$f\" \"$x\"", RuleArithmetic},
	{"printf \"$f\" x", RuleArithmetic},
	{"printf \"-$f\" x", RuleArithmetic},
	{"builtin printf -v 'a[x]' y", RuleArithmetic},
	{"read 'a[$(rm v)]'", RuleArithmetic},
	{"read \"$n\"", RuleArithmetic},
	{"read -a \"$n\"", RuleArithmetic},
	{"read -r a[x]", RuleArithmetic},
	{"read -t 1 -r x 'a[x]'", RuleArithmetic},
	{"mapfile \"$n\"", RuleArithmetic},
	{"readarray -t 'a[x]'", RuleArithmetic},
	{"getopts ab \"$n\"", RuleArithmetic},
	{"getopts ab 'a[x]'", RuleArithmetic},
	{"wait -n -p 'a[x]'", RuleArithmetic},
	{"wait -p \"$v\"", RuleArithmetic},
	{"exec {a[x]}>/dev/null", RuleArithmetic},
	// Variables bash gives the integer attribute.
	{"OPTIND=$x", RuleArithmetic},
	{"RANDOM=y", RuleArithmetic},
	{"SECONDS=$x true", RuleArithmetic},
	{"declare OPTIND=y", RuleArithmetic},
	{"for RANDOM in y; do :; done", RuleArithmetic},
	{"read OPTIND", RuleArithmetic},
	{"printf -v RANDOM %s x", RuleArithmetic},
	{"getopts ab OPTIND", RuleArithmetic},
	// Variables holding code, set from data.
	{"printf -v PS4 %s x", RuleDynamic},
	{"read PS4", RuleDynamic},
	{"read -r PROMPT_COMMAND", RuleDynamic},
	{"BASH_ENV=$x bash -c true", RuleDynamic},
	{"PROMPT_COMMAND=('true')", RuleDynamic},
	{"export \"PS4=$x\"", RuleArithmetic},
	// The session's own names, functions, builtins and descriptors.
	{"__nx_n='a[$(rm victim)]0'; true", RuleReserved},
	{"__nx_c=x", RuleReserved},
	{"echo $__nx_c", RuleReserved},
	{"echo ${__nx_k}", RuleReserved},
	{"echo ${#__nx_c}", RuleReserved},
	{"unset __nx_c", RuleReserved},
	{"unset -f __nx_get", RuleReserved},
	{"unset -f \"$f\"", RuleReserved},
	{"__nx_get() { :; }", RuleReserved},
	{"function __nx_out { :; }", RuleReserved},
	{"__nx_post", RuleReserved},
	{"builtin __nx_post", RuleReserved},
	{"declare -p __nx_t", RuleReserved},
	{"export __nx_x", RuleReserved},
	{"declare -f __nx_get", RuleReserved},
	{"read __nx_c", RuleReserved},
	{"printf -v __nx_c x", RuleReserved},
	{"for __nx_i in 1; do :; done", RuleReserved},
	{"coproc __nx_x { :; }", RuleReserved},
	{"exec {__nx_fd}>/dev/null", RuleReserved},
	{"[[ -v __nx_c ]]", RuleReserved},
	{"read() { :; }", RuleReserved},
	{"printf() { :; }", RuleReserved},
	{"function eval { :; }", RuleReserved},
	{"set() { :; }", RuleReserved},
	{"command() { :; }", RuleReserved},
	{"[() { :; }", RuleReserved},
	{"enable -n read", RuleReserved},
	{"enable -n printf eval", RuleReserved},
	{"echo rm v > /proc/self/fd/62", RuleReserved},
	{"echo rm v > /dev/fd/62", RuleReserved},
	{"echo rm v >> /dev//fd/9", RuleReserved},
	{"echo rm v > /proc/$$/fd/10", RuleReserved},
	{"echo rm v > \"/proc/$PPID/fd/10\"", RuleReserved},
	{"cat < /proc/self/fd/10", RuleReserved},
	{"exec 3<>/proc/self/task/1/fd/62", RuleReserved},
	{"echo > /dev/fd/$n", RuleReserved},
	{"echo x > /dev/../proc/self/fd/62", RuleReserved},
	{"echo x >&/proc/self/fd/11", RuleReserved},
	// Descriptors from 10 up: the shell's, one of them the command stream.
	{"exec 11<&-; exec 11< <(printf 'rm v\\0')", RuleReserved},
	{"exec 10<&- 11<&- 12<&-", RuleReserved},
	{"exec 62</dev/null", RuleReserved},
	{"exec {x}<&-", RuleReserved},
	{"exec {x}>&-", RuleReserved},
	{"cat <&11", RuleReserved},
	{"cat <&11-", RuleReserved},
	{"echo x >&\"$fd\"", RuleReserved},
	{"exec 3<&$n", RuleReserved},
	{"read -u 11 x", RuleReserved},
	{"read -ru11 x", RuleReserved},
	{"read -u \"$fd\" x", RuleReserved},
	{"mapfile -u 63 a", RuleReserved},
	{"exec 10>/tmp/x", RuleReserved},
}

// evaluatedAllow is an allow list naming every program and builtin the
// commands of evaluated use, so that only the new rules can refuse them.
var evaluatedAllow = []string{"echo", "printf", "test", "[", ":", "cat", "true", "declare", "typeset", "local",
	"export", "readonly", "let", "read", "mapfile", "readarray", "getopts", "wait", "unset", "exec", "eval", "bash",
	"builtin", "command", "enable", "__nx_post", "break", "pwd"}

func TestEvaluatedDataRefused(t *testing.T) {
	policies := map[string]*Policy{
		"deny rm":            mustNew(t, nil, []string{"rm"}, Operator{}),
		"allow":              mustNew(t, evaluatedAllow, nil, Operator{}),
		"operator deny only": mustNew(t, nil, nil, Operator{Deny: []string{"curl"}}),
	}
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			for _, tc := range evaluated {
				v := refused(t, p, tc.cmd, tc.rule)
				if v != nil && (v.Detail == "" || v.Program == "") {
					t.Errorf("Check(%q): no detail or text: %+v", tc.cmd, v)
				}
			}
		})
	}
}

// TestIssueExamplesUnderAllowList: the hardening issue's allow list.
func TestIssueExamplesUnderAllowList(t *testing.T) {
	p := mustNew(t, []string{"echo", "printf", "test"}, nil, Operator{})
	for _, cmd := range []string{"x='a[$(rm victim)]'; echo $((x))", "printf -v 'a[$(rm v)]' x", "test -v 'a[$(rm v)]'"} {
		if v := violation(t, cmd, p.Check(cmd)); v.Rule != RuleArithmetic {
			t.Errorf("Check(%q): rule %q, want %q", cmd, v.Rule, RuleArithmetic)
		}
	}
	for _, cmd := range []string{"echo $((6*7))", "[[ 3 -eq 3 ]]", "test 3 -eq 3", "printf '%d\\n' $((2**10))"} {
		if err := p.Check(cmd); err != nil {
			t.Errorf("Check(%q) = %v, want nil", cmd, err)
		}
	}
}

// literalArithmetic: what the text shows in full still runs.
var literalArithmetic = []string{
	"echo $((6*7))",
	"echo $(( (1+2) * 3 ))",
	"echo $((0x10 + 010 + 2#101 + 64#zZ@_))",
	"echo $((1 << 4 | 3, 7 % 2))",
	"echo $[1+1]",
	"(( 1 ))",
	"for ((;;)); do break; done",
	"let 1+1 '2*3'",
	"[[ 3 -eq 3 ]]",
	"[[ 1+1 -eq 2 ]]",
	"[[ $# -gt 0 ]]",
	"[[ $? -ne 0 ]]",
	"[[ \"$?\" -ne 0 ]]",
	"[[ ${#x} -lt 3 ]]",
	"[[ $x == y && -n $z ]]",
	"echo $(( ${#a[@]} - 1 ))",
	"echo $(( $$ + $! ))",
	"echo ${a[0]} ${a[@]} ${a[*]} ${#a[@]} ${!a[@]} ${a[-1]} ${a[ 1 ]}",
	"echo ${x:1} ${x: -1} ${x:0:2} ${@:2} ${a[@]:1:2}",
	"echo ${x:-$((1+2))} ${!prefix*}",
	"a[0]=1",
	"a=(1 2 3)",
	"a=([0]=x [1]=y)",
	"a+=(z)",
	"declare -A m=([k]=v [\"a b\"]=c)",
	"declare -a a=(1 2)",
	"declare x=1 y='lit'",
	"declare -r x=1",
	"declare -x y=lit",
	"declare +i x",
	"declare -p x",
	"declare -f f",
	"declare 'a[1]=x'",
	"f() { local y; y=$1; }",
	"f() { local -a arr; arr=(\"$@\"); }",
	"export PATH=\"$HOME/bin:$PATH\"",
	"export X=$(pwd)",
	"export -n X",
	"readonly R=$x",
	"x=$y",
	"a=$x",
	"OPTIND=1",
	"RANDOM=42",
	"read -r line",
	"read -ra arr",
	"IFS=, read -r a b",
	"read -r a[1]",
	"printf -v out '%s' x",
	"printf -vout '%s' x",
	"printf '%s\\n' \"$x\"",
	"printf \"$fmt\"",
	"printf \"hello %s $name\\n\" x",
	"mapfile -t lines < f",
	"readarray arr",
	"getopts ab opt",
	"wait -n",
	"wait -p pid",
	"unset x",
	"unset -f f",
	"unset 'a[1]'",
	"unset a[@]",
	"unset -v x y",
	"test -f x",
	"[ -f \"$f\" ]",
	"[ \"$a\" = \"$b\" ]",
	"[ -n \"$x\" ]",
	"[ \"$x\" -eq 1 ]",
	"[ -z \"$x\" -o -n \"$y\" ]",
	"[ \"x$a\" \"y$b\" ]",
	"test -v x",
	"[ -v a[1] ]",
	"[ $# -gt 0 ]",
	"[[ -v x ]]",
	"[[ -v a[0] ]]",
	"exec {fd}>/dev/null",
	"exec {a[1]}>/dev/null",
	"for x in a b; do :; done",
	"case $x in 1) ;; esac",
	"echo x > /dev/fd/2",
	"echo x 2>/dev/stderr",
	"cat /proc/cpuinfo",
	"cat < /proc/cpuinfo",
	"echo x > \"$out\"",
	"echo x > ./fd/3",
	"diff <(echo a) <(echo b)",
	"echo $__other $_nx $nx_x",
	"read_all() { :; }",
	"enable -n kill",
	"exec 3>/tmp/log; echo hi >&3; exec 3>&-",
	"make 2>&1 | tail",
	"read -u 3 line",
	"exec {fd}>/tmp/x",
	"echo x >&2",
	"cat <&0",
	"exec 9>/tmp/lock",
	"ls >&/dev/null",
	"builtin() { :; }",
	"test() { :; }",
}

func TestLiteralArithmeticAllowed(t *testing.T) {
	deny := mustNew(t, nil, []string{"rm"}, Operator{})
	allow := mustNew(t, append(evaluatedAllow, "diff", "f", "kill", "make", "tail", "ls"), nil, Operator{})
	for _, cmd := range literalArithmetic {
		for name, p := range map[string]*Policy{"deny": deny, "allow": allow} {
			if err := p.Check(cmd); err != nil {
				t.Errorf("%s: Check(%q) = %v, want nil", name, cmd, err)
			}
		}
	}
}

// TestEvaluatedProgramsStillFound: a program hidden where data is evaluated
// is reported as the program (the rule on evaluated data comes after).
func TestEvaluatedProgramsStillFound(t *testing.T) {
	p := mustNew(t, nil, []string{"rm"}, Operator{})
	for _, cmd := range []string{
		"for ((i=0;i<1;i++)); do rm x; done",
		"echo $((x)); rm y",
		"declare -a a='([0]=$(rm v))'",
		"declare 'a=([0]=$(rm v))'",
		"readonly -a r='([0]=$(rm v))'",
		"BASH_ENV='$(rm v)' bash -c true",
		"export 'PS4=$(rm v)'",
		"env BASH_ENV='$(rm v)' bash -c true",
		"env 'PS4=`rm v`' bash -xc true",
		"compgen -W '$(rm v)' x",
		"compgen -C 'rm v' x",
		"complete -C 'rm v' x",
		"echo ${x:=$(rm v)}",
	} {
		v := violation(t, cmd, p.Check(cmd))
		if v.Rule != denyRm {
			t.Errorf("Check(%q): rule %q (%v), want %q", cmd, v.Rule, v, denyRm)
		}
	}
}

func TestArithLiteral(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "1": true, "1+2*3": true, "0x1F": true, "2#101": true, "64#@_zZ": true, " ( 1 ) ": true,
		"1 ? 2 : 3": true, "x": false, "1+x": false, "a[1]": false, "$x": false, "_": false, "1e": true,
		"`x`": false, "\"1\"": false, "1;2": false,
	} {
		if got := arithLiteral(s); got != want {
			t.Errorf("arithLiteral(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestSplitRef(t *testing.T) {
	for _, tc := range []struct {
		in, name, sub, rest string
		hasSub, ok          bool
	}{
		{"x", "x", "", "", false, true},
		{"x=1", "x", "", "=1", false, true},
		{"a[1]=2", "a", "1", "=2", true, true},
		{"a[b[1]]+=2", "a", "b[1]", "+=2", true, true},
		{"a[1=$(x)]=1", "a", "1=$(x)", "=1", true, true},
		{"a[x", "a", "x", "", true, true},
		{"1x", "", "", "1x", false, false},
		{"-v", "", "", "-v", false, false},
	} {
		name, sub, hasSub, rest, ok := splitRef(tc.in)
		if name != tc.name || sub != tc.sub || hasSub != tc.hasSub || rest != tc.rest || ok != tc.ok {
			t.Errorf("splitRef(%q) = %q %q %v %q %v", tc.in, name, sub, hasSub, rest, ok)
		}
	}
}

func TestEvaluatedMessage(t *testing.T) {
	p := mustNew(t, nil, []string{"rm"}, Operator{})
	err := p.Check("echo $((x))")
	if err == nil || !strings.HasPrefix(err.Error(), `blocked by policy rule "arithmetic on data": x: $((...)) evaluates the value of the variable x`) {
		t.Errorf("message: %v", err)
	}
	err = p.Check("__nx_c=1")
	if err == nil || !strings.Contains(err.Error(), `"reserved name"`) || !strings.Contains(err.Error(), ReservedPrefix) {
		t.Errorf("message: %v", err)
	}
}
