// Command netpoll measures one poll of a network-stream session on a server holding many
// connections (docs/BENCHMARKS.md, "Observers: network streams"): listing every TCP socket
// with netlink sock_diag, finding the server's by its socket inodes, and keeping them, against
// `ss -tnpi` doing the same for a user (sockets with their tcp_info and owning processes).
//
//	go run ./bench/netpoll [-conns 10000] [-polls 20]
//
// The server is this program run again as a child (its own process, as a managed server is);
// the clients are this process. Both need a descriptor per connection: the soft limit is
// raised to the hard one.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"

	"strings"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/sockdiag"
)

const serverEnv = "NEXUS_NETPOLL_SERVER"

func main() {
	if os.Getenv(serverEnv) != "" {
		serve()
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "netpoll:", err)
		os.Exit(1)
	}
}

// serve accepts connections and holds them until stdin closes.
func serve() {
	raiseLimit()
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

func raiseLimit() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run() error {
	conns := flag.Int("conns", 10000, "connections the server holds")
	polls := flag.Int("polls", 20, "polls measured")
	flag.Parse()
	raiseLimit()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("executable: %w", err)
	}
	srv := exec.Command(self) //nolint:gosec,noctx // this program, as the server
	srv.Env = append(os.Environ(), serverEnv+"=1")
	stdin, err := srv.StdinPipe()
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	out, err := srv.StdoutPipe()
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	defer func() { _ = stdin.Close(); _ = srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("server port: %w", err)
	}
	port := strings.TrimSpace(line)
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for range *conns {
		c, err := new(net.Dialer).DialContext(context.Background(), "tcp", "127.0.0.1:"+port)
		if err != nil {
			return fmt.Errorf("dial %d: %w", len(clients), err)
		}
		clients = append(clients, c)
	}
	pid := srv.Process.Pid
	// Wait until the server has accepted every connection (its socket count), so every poll
	// sees the same sockets.
	for start := time.Now(); ; {
		n := len(sockdiag.Inodes([]int{pid}))
		if n >= *conns+1 {
			break
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("the server holds %d sockets of %d", n, *conns+1)
		}
		time.Sleep(10 * time.Millisecond) // waiting for another process's accept loop
	}
	var cache sockdiag.InodeCache
	poll := func() (int, error) {
		all, err := sockdiag.List()
		if err != nil {
			return 0, err //nolint:wrapcheck // reported as is
		}
		alive := make(map[uint32]bool, len(all))
		for _, s := range all {
			alive[s.Inode] = true
		}
		mine := cache.Inodes([]int{pid}, func(i uint32) bool { return alive[i] })
		n := 0
		for _, s := range all {
			if s.Inode != 0 && mine[s.Inode] {
				n++
			}
		}
		return n, nil
	}
	var lists, inodes []time.Duration
	for range 5 {
		t0 := time.Now()
		if _, err := sockdiag.List(); err != nil {
			return err
		}
		t1 := time.Now()
		sockdiag.Inodes([]int{pid})
		lists, inodes = append(lists, t1.Sub(t0)), append(inodes, time.Since(t1))
	}
	var libs []time.Duration
	for range 5 {
		t0 := time.Now()
		if _, err := sockdiag.ListLibrary(); err != nil {
			return err
		}
		libs = append(libs, time.Since(t0))
	}
	fmt.Printf("parts: sock_diag listing p50 %s (through vishvananda/netlink: %s), the server's inodes p50 %s\n", p50(lists), p50(libs), p50(inodes))
	var walls, cpus []time.Duration
	var found int
	for range *polls {
		c0, t0 := cpuTime(), time.Now()
		if found, err = poll(); err != nil {
			return err
		}
		walls, cpus = append(walls, time.Since(t0)), append(cpus, cpuTime()-c0)
	}
	var ssWalls []time.Duration
	ssPolls := max(*polls/4, 3)
	for range ssPolls {
		t0 := time.Now()
		cmd := exec.Command("ss", "-tnpi") //nolint:noctx // measured to its end
		b, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) || errors.Is(err, exec.ErrNotFound) {
				ssWalls = nil
				break
			}
			return fmt.Errorf("ss: %w", err)
		}
		ssWalls = append(ssWalls, time.Since(t0))
		_ = b
	}
	fmt.Printf("connections held by the server: %d (sockets of the server found by a poll: %d)\n", *conns, found)
	fmt.Printf("nexus poll (sock_diag + the server's inodes, cached): wall p50 %s, max %s; CPU p50 %s\n", p50(walls), slices.Max(walls), p50(cpus))
	if ssWalls != nil {
		fmt.Printf("ss -tnpi (the same, for a user):           wall p50 %s (%d runs)\n", p50(ssWalls), len(ssWalls))
		fmt.Printf("ratio (ss / nexus, wall p50): %.1f\n", float64(p50(ssWalls))/float64(p50(walls)))
	} else {
		fmt.Println("ss is not installed: no baseline")
	}
	fmt.Printf("target: one poll under 60 ms: %s\n", verdict(p50(walls) < 60*time.Millisecond))
	return nil
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(10 * time.Microsecond)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
