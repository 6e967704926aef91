package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/nexus-run/nexus/internal/reaper"
)

// watchdogCommand, as the first argument, makes the binary the watchdog of an owner (a gateway,
// a nexus mcp): see package reaper. It is not a cobra command, so that nothing of the CLI's
// set-up (the state directory's checks, flags) stands between a dead owner and its cleanup.
const watchdogCommand = "__nexus-watchdog"

// ownerDir holds the records of every owner of this state directory.
func (a *app) ownerDir() string { return filepath.Join(a.stateDir, "owners") }

// openOwner makes this process the owner of the processes its sessions start, after reaping
// what a crashed predecessor left, with a watchdog that reaps them should this process be
// killed.
func (a *app) openOwner(ctx context.Context, kind string, logger *slog.Logger) (*reaper.Owner, error) {
	o, err := reaper.Open(ctx, reaper.Options{
		Dir:    a.ownerDir(),
		Kind:   kind,
		Logger: logger,
		Watchdog: func(dir string) *exec.Cmd {
			// /proc/self/exe is this very binary even if the file was replaced or removed since;
			// argv[0] stays "nexus" (a test binary standing in for nexus goes by it).
			return &exec.Cmd{Path: "/proc/self/exe", Args: []string{"nexus", watchdogCommand, dir}}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("set up process ownership: %w", err)
	}
	if !o.Contained() {
		logger.Debug("cgroups unavailable: a session's processes are tracked by process session (one that starts its own session escapes)")
	}
	return o, nil
}

// closeOwner reaps what is left of the owner's processes; leftovers make the command fail.
func closeOwner(ctx context.Context, o *reaper.Owner, logger *slog.Logger) error {
	left, err := o.Close(ctx)
	if err != nil {
		logger.Error("processes left running", "count", len(left), "err", err)
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

func runWatchdog(ctx context.Context, env Env, dir string) int {
	// A terminal's hangup or Ctrl-C is meant for the owner; the watchdog must outlive it to
	// clean up after it.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	if err := reaper.RunWatchdog(ctx, dir, env.Stdin, nil); err != nil {
		return 1
	}
	return 0
}
