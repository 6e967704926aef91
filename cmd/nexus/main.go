// Command nexus is a session runtime for AI agents: live sessions, agent shells, conversations
// and history, in one binary.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"

	"github.com/nexus-run/nexus/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise it comes from the
// module's build information.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Version: binaryVersion()})
	stop()
	os.Exit(code)
}

func binaryVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}
