package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/procfs"
)

// waitnoprocs SID: wait until no live process is left in session SID (zombies that only pid 1
// could reap do not count).
func cmdWaitNoProcs(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitnoprocs")
	if len(args) != 1 {
		ts.Fatalf("usage: waitnoprocs SID")
	}
	sid := pidArg(ts, args[0])
	var live []procfs.Proc
	if !poll(func() bool {
		live = live[:0]
		for _, p := range procfs.Members(sid) {
			if !p.Dead() {
				live = append(live, p)
			}
		}
		return len(live) == 0
	}) {
		ts.Fatalf("processes left in session %d: %+v", sid, live)
	}
}

// killwatchdog: SIGKILL every owner watchdog whose records lie in this script's state
// directory, as if the machine's OOM killer or a careless `kill -9 -1` had taken it.
func cmdKillWatchdog(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "killwatchdog")
	owners := filepath.Join(stateDir(ts), "owners") + string(filepath.Separator)
	n := 0
	for _, p := range procfs.All() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if err != nil {
			continue
		}
		argv := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
		if len(argv) == 3 && string(argv[1]) == "__nexus-watchdog" && bytes.HasPrefix(argv[2], []byte(owners)) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			n++
		}
	}
	if n == 0 {
		ts.Fatalf("no watchdog of %s found", owners)
	}
}
