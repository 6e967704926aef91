package policy

import (
	"slices"
	"strings"
	"testing"
)

// wrapperBypasses run rm through a wrapper; deny: [rm] must refuse each one,
// naming rm or as a dynamic command.
var wrapperBypasses = []struct{ cmd, rule string }{
	// The hardening issue's examples.
	{"chrt -o 0 rm v", denyRm},
	{"unshare rm v", denyRm},
	{"strace -o /dev/null rm v", denyRm},
	{"prlimit --nofile=1024 rm v", denyRm},
	{"setpriv --reuid=0 rm v", denyRm},
	{"setarch x86_64 rm v", denyRm},
	{"linux64 rm v", denyRm},
	{"fakeroot rm v", denyRm},
	{"script -qc 'rm v' /dev/null", denyRm},
	{"sg root -c 'rm v'", denyRm},
	{"capsh -- -c 'rm v'", denyRm},
	{"gdb -batch -ex 'shell rm v'", dynamic},
	// util-linux
	{"chrt -f 10 rm v", denyRm},
	{"chrt --sched-runtime 5 -d 0 rm v", denyRm},
	{"chrt -v -r 1 rm v", denyRm},
	{"choom -n 100 rm v", denyRm},
	{"choom -n 100 -- rm v", denyRm},
	{"prlimit -n1024 --cpu=10 rm v", denyRm},
	{"prlimit rm v", denyRm},
	{"setpriv --nnp --clear-groups rm v", denyRm},
	{"setpriv --reuid 0 rm v", denyRm},
	{"setarch x86_64 -R rm v", denyRm},
	{"setarch i686 --addr-no-randomize rm v", denyRm},
	{"setarch x86_64 <<< 'rm v'", denyRm},
	{"linux32 -3 rm v", denyRm},
	{"i386 rm v", denyRm},
	{"x86_64 rm v", denyRm},
	{"unshare -m -u -f rm v", denyRm},
	{"unshare --mount=/tmp/ns -r rm v", denyRm},
	{"unshare -R / -w /tmp rm v", denyRm},
	{"unshare --fork --pid --mount-proc rm v", denyRm},
	{"unshare <<< 'rm v'", denyRm},
	{"unshare", dynamic},
	{"nsenter -t 1 -m -u rm v", denyRm},
	{"nsenter --target=1 --all rm v", denyRm},
	{"nsenter -a -t 1", dynamic},
	{"uclampset -m 10 -M 100 rm v", denyRm},
	{"switch_root /new rm v", denyRm},
	{"script -c 'rm v'", denyRm},
	{"script --command='rm v' log", denyRm},
	{"script -q -a log -c 'rm v'", denyRm},
	{"script -q /dev/null <<< 'rm v'", denyRm},
	{"script -q /dev/null", dynamic},
	{"runcon system_u:system_r:unconfined_t:s0 rm v", denyRm},
	{"runcon -t unconfined_t rm v", denyRm},
	{"taskset 0x1 rm v", denyRm},
	{"ionice -c 2 -n 7 rm v", denyRm},
	{"setsid -w rm v", denyRm},
	{"flock -n /tmp/l rm v", denyRm},
	// coreutils
	{"nice -n 19 ionice -c3 chrt -i 0 rm v", denyRm},
	{"timeout -k 5 10 rm v", denyRm},
	{"stdbuf -o0 rm v", denyRm},
	{"chroot --userspec=1:1 / rm v", denyRm},
	{"sort --compress-program=rm -S 1 f", denyRm},
	{"sort -S1 --compress-prog=rm f", denyRm},
	{"sort f --compress-program rm", denyRm},
	{"split --filter='rm v' f", denyRm},
	{"split -l 1 f --filter 'rm v'", denyRm},
	{"install -s --strip-program=rm a b", denyRm},
	// strace, ltrace, valgrind, fakeroot
	{"strace -f -e trace=all rm v", denyRm},
	{"strace -o '|rm v' true", denyRm},
	{"strace --output='!rm v' true", denyRm},
	{"strace -p 1 -o \"$f\"", dynamic},
	{"ltrace -o /dev/null rm v", denyRm},
	{"valgrind --tool=none --trace-children=yes rm v", denyRm},
	{"valgrind --db-command='rm v' true", dynamic},
	{"fakeroot -- rm v", denyRm},
	{"fakeroot -u -s state rm v", denyRm},
	{"fakeroot -f rm true", denyRm},
	{"fakeroot -l /tmp/evil.so true", dynamic},
	{"fakeroot-sysv rm v", denyRm},
	{"fakeroot <<< 'rm v'", denyRm},
	// libcap2-bin
	{"capsh --caps=cap_chown+ep -- -c 'rm v'", denyRm},
	{"capsh --shell=/bin/rm -- v", denyRm},
	{"capsh --drop=cap_net_raw == -- -c 'rm v'", denyRm},
	{"capsh -+ -c 'rm v'", denyRm},
	{"capsh --frob -- -c ls", dynamic},
	// login, passwd
	{"sg root 'rm v'", denyRm},
	{"sg - root -c 'rm v'", denyRm},
	{"sg root <<< 'rm v'", denyRm},
	{"newgrp root <<< 'rm v'", denyRm},
	{"newgrp", dynamic},
	{"login -f root", dynamic},
	{"vipw", dynamic},
	{"sudoedit /etc/hosts", dynamic},
	// debianutils, procps, moreutils and others
	{"run-parts /usr/bin", dynamic},
	{"watch -x rm v", denyRm},
	{"chronic rm v", denyRm},
	{"ifne -n rm v", denyRm},
	{"eatmydata rm v", denyRm},
	{"unbuffer rm v", denyRm},
	{"numactl --interleave=all rm v", denyRm},
	{"cgexec -g cpu:/ rm v", denyRm},
	{"faketime '2020-01-01' rm v", denyRm},
	{"faketime --date-prog=rm x true", denyRm},
	{"xvfb-run -a rm v", denyRm},
	{"dbus-run-session -- rm v", denyRm},
	{"pkexec --user root rm v", denyRm},
	{"systemd-run --scope -q rm v", denyRm},
	{"systemd-run -p ExecStartPre='/bin/rm v' true", dynamic},
	{"torsocks rm v", denyRm},
	{"proxychains4 -q rm v", denyRm},
	{"lckdo /tmp/l rm v", denyRm},
	{"perf stat rm v", dynamic},
	{"parallel rm ::: v", dynamic},
	{"hyperfine 'rm v'", dynamic},
	{"pee 'rm v'", dynamic},
	{"crontab -", dynamic},
	{"at now <<< 'rm v'", dynamic},
	{"lldb -o 'platform shell rm v'", dynamic},
	{"firejail rm v", dynamic},
	{"bwrap --bind / / rm v", dynamic},
	// tar, rsync, ssh, man, zip
	{"tar --to-command='rm v' -xf a.tar", denyRm},
	{"tar -xf a.tar --to-com='rm v'", denyRm},
	{"tar -I 'rm v' -cf a.tar d", denyRm},
	{"tar -Irm -cf a.tar d", denyRm},
	{"tar --use-compress-program=rm -cf a.tar d", denyRm},
	{"tar -cf a.tar --checkpoint=1 --checkpoint-action=exec='rm v' d", denyRm},
	{"tar -cf a.tar -F 'rm v' -M d", denyRm},
	{"tar cIf rm a.tar d", denyRm},
	{"tar -cf a.tar --rsh-command=/bin/rm h:d", denyRm},
	{"tar -xf a.tar $opt", dynamic},
	{"rsync -e 'rm v' a h:b", denyRm},
	{"rsync -avze 'sh -c \"rm v\"' a h:b", denyRm},
	{"rsync --rsh='rm v' a h:b", denyRm},
	{"rsync \"$opts\" a h:b", dynamic},
	{"ssh -o ProxyCommand='rm v' h", denyRm},
	{"ssh -oLocalCommand='rm v' -o PermitLocalCommand=yes h", denyRm},
	{"ssh -o 'KnownHostsCommand rm v' h", denyRm},
	{"ssh -o 'Match exec \"rm v\"' h", dynamic},
	{"ssh -o \"$o\" h", dynamic},
	{"scp -S rm a h:b", denyRm},
	{"scp -o ProxyCommand='rm v' a h:b", denyRm},
	{"sftp -b batch h", dynamic},
	{"man -P 'rm v' ls", denyRm},
	{"man --pager='rm v' ls", denyRm},
	{"man -Hrm ls", denyRm},
	{"zip -T -TT 'rm v' a.zip f", denyRm},
	{"zip --unzip-command 'rm v' -T a.zip f", denyRm},
	// Operands from data where an option could stand.
	{"timeout \"$t\" KILL 5 rm v", dynamic},
	{"flock \"$l\" 'rm v' x", dynamic},
	{"chrt \"$p\" rm v", dynamic},
	{"sort \"$f\"", dynamic},
	// Wrappers inside wrappers, and busybox applets.
	{"busybox chrt -o 0 rm v", denyRm},
	{"sudo -u root unshare -r setpriv --nnp rm v", denyRm},
	{"xargs chrt -o 0 rm", denyRm},
	{"find . -exec setarch x86_64 rm {} +", denyRm},
	{"echo v | xargs unshare", dynamic},
}

func TestWrapperBypasses(t *testing.T) {
	p := mustNew(t, nil, []string{"rm"}, Operator{})
	for _, tc := range wrapperBypasses {
		v := refused(t, p, tc.cmd, tc.rule)
		if v != nil && tc.rule == denyRm && !strings.EqualFold(v.Program, "rm") {
			t.Errorf("Check(%q): Program = %q, want rm", tc.cmd, v.Program)
		}
	}
}

// wrapperUses run nothing denied: each must pass deny: [rm].
var wrapperUses = []string{
	"chrt -p 1234", "chrt -m", "chrt -p 10 1234", "chrt -o 0 ls",
	"choom -p 1", "prlimit -p 1", "prlimit --nofile=1024 make", "setpriv -d", "setarch --list", "setarch x86_64 -R ls",
	"linux64 uname -m", "unshare -r id", "nsenter -t 1 -n ip addr", "uclampset -p 1", "script -q -c 'make test' /dev/null",
	"strace -f -o trace.txt make", "strace -p 1", "strace -c -- ls", "fakeroot dpkg-deb -b d", "capsh --print", "capsh --has-p=cap_chown",
	"capsh -- -c 'ls -la'", "sg root -c 'id'", "runcon -t t ls", "gdb --version", "perf --version", "run-parts --test /etc/cron.daily",
	"crontab -l", "sort -k2 -n f", "sort -S 1M --parallel=2 -o out f", "sort -- \"$f\"", "sort -o \"$out\" -- \"$f\"",
	"split -l 100 f part.", "install -m 0644 a b", "tar czf out.tgz dir", "tar -xzf \"$archive\" -C \"$dir\"",
	"tar -cf a.tar --checkpoint=10 --checkpoint-action=dot d", "tar -I zstd -cf a.tar d", "tar -cf - -- \"$dir\"",
	"rsync -av a/ b/", "rsync -av -- \"$src\" \"$dst\"", "ssh -o BatchMode=yes -p 22 h ls", "ssh -i key h 'rm v'",
	"scp -P 2222 a h:b", "man ls", "man -k printf", "zip -r a.zip d", "timeout 5 make", "timeout -- \"$t\" make",
	"flock -- \"$lock\" make", "chronic make", "numactl --hardware", "systemd-run --user --scope make", "valgrind --leak-check=full ./a.out",
	"xvfb-run -a make test", "ionice -c3 nice make",
}

func TestWrapperUsesAllowed(t *testing.T) {
	p := mustNew(t, nil, []string{"rm"}, Operator{})
	for _, cmd := range wrapperUses {
		if err := p.Check(cmd); err != nil {
			t.Errorf("Check(%q) = %v, want nil", cmd, err)
		}
	}
}

// TestWrapperTableDocumented: every program the policy follows (or refuses
// as a wrapper it cannot follow) says how it takes its command, and the
// issue's wrappers are all there.
func TestWrapperTableDocumented(t *testing.T) {
	docs := wrapperDocs()
	for name := range wrappers {
		if _, builtin := builtinChecks[name]; builtin {
			continue
		}
		if strings.TrimSpace(docs[name]) == "" {
			t.Errorf("wrapper %q does not say how it takes its command", name)
		}
	}
	for name := range docs {
		if wrappers[name] == nil {
			t.Errorf("%q is documented but not handled", name)
		}
	}
	for _, name := range []string{"chrt", "unshare", "strace", "prlimit", "setpriv", "setarch", "linux64", "fakeroot",
		"script", "sg", "capsh", "gdb", "xargs", "parallel", "watch", "timeout", "nice", "nohup", "env", "stdbuf", "flock",
		"ionice", "taskset", "runuser", "su", "sudo", "doas", "chroot", "nsenter", "setsid", "busybox", "time",
		"systemd-run", "ssh", "find", "choom", "uclampset", "runcon", "sort", "split", "install", "tar"} {
		if wrappers[name] == nil {
			t.Errorf("%s is not in the wrapper table", name)
		}
	}
	names := make([]string, 0, len(docs))
	for name := range docs {
		names = append(names, name)
	}
	slices.Sort(names)
	t.Logf("%d wrappers: %s", len(names), strings.Join(names, " "))
}
