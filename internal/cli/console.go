package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
)

func (a *app) consoleCmd() *cobra.Command {
	var (
		format string
		open   bool
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Open the web console: a one-time sign-in link to the gateway's page (needs serve --listen)",
		Long: "Mints a one-time sign-in code (valid 10 minutes, once) and prints the link; with --open, opens it in\n" +
			"the browser ($BROWSER, or xdg-open). The browser keeps an HttpOnly cookie; the code leaves the address bar.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			code, err := a.client().ConsoleCode(cmd.Context())
			if err != nil {
				return err
			}
			if code.URL == "" {
				return abi.Errorf(abi.CodeCapabilityUnsupported, "", "the gateway has no TCP listener for a browser: start it with nexus serve --listen 127.0.0.1:7777")
			}
			err = a.print(format, code, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s\n(one-time link, valid until %s)\n", code.URL, code.ExpiresAt)
				return err
			})
			if err != nil || !open {
				return err
			}
			return openBrowser(cmd.Context(), code.URL)
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	cmd.Flags().BoolVar(&open, "open", false, "open the link in the browser")
	return cmd
}

// openBrowser runs $BROWSER or xdg-open on url, without waiting for the browser to close.
func openBrowser(ctx context.Context, url string) error {
	prog := os.Getenv("BROWSER")
	if prog == "" {
		prog = "xdg-open"
	}
	cmd := exec.CommandContext(context.WithoutCancel(ctx), prog, url) //nolint:gosec // the user's own browser setting
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("open the browser (%s): %w; open the link above by hand", prog, err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
