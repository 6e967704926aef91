package procfs

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Proc
		bad  bool
	}{
		{name: "plain", in: "42 (bash) S 1 42 42 34816 50 4194560", want: Proc{PID: 42, PPID: 1, PGID: 42, SID: 42, TPGID: 50, State: 'S', Comm: "bash"}},
		{name: "comm with spaces and parens", in: "7 (a (b) c) Z 3 7 5 0 -1 0", want: Proc{PID: 7, PPID: 3, PGID: 7, SID: 5, TPGID: -1, State: 'Z', Comm: "a (b) c"}},
		{name: "truncated", in: "7 (x) S 1", bad: true},
		{name: "no comm", in: "7 x S 1 2 3 4 5", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(tc.want.PID, []byte(tc.in))
			if tc.bad {
				if err == nil {
					t.Fatalf("parse(%q) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestSessionFindsChildInNewSession(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start sleep:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	members := Session(pid)
	if len(members) != 1 || members[0].PID != pid || members[0].Comm != "sleep" {
		t.Fatalf("Session(%d) = %+v, want the sleep process alone", pid, members)
	}
	self, err := Stat(os.Getpid())
	if err != nil || self.PID != os.Getpid() {
		t.Fatalf("Stat(self) = %+v, %v", self, err)
	}
}

func TestStartTimeAndBootID(t *testing.T) {
	self, err := Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.Start == 0 {
		t.Fatal("no start time for this process")
	}
	again, _ := Stat(os.Getpid())
	if again.Start != self.Start {
		t.Fatalf("start time changed: %d then %d", self.Start, again.Start)
	}
	if id := BootID(); len(id) < 16 || id != BootID() {
		t.Fatalf("boot id %q", id)
	}
}
