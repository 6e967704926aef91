package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
)

// chatResolveCmd routes an interaction to its chat: the current session of KEY, a new one when
// the key has none, or a fresh one when the reset policy (daily hour, idle window) says the
// current session is over. It is what a channel adapter calls for each incoming message.
func (a *app) chatResolveCmd() *cobra.Command {
	var hour int
	var idle time.Duration
	var noAuto bool
	cmd := a.printing(&cobra.Command{
		Use:   "resolve KEY",
		Short: "The current session of a session key, created or reset by the reset policy (daily hour, idle window)",
		Long: "Prints {\"key\",\"fresh\",\"entry\"}. A key without a chat gets a new one; a chat whose\n" +
			"daily boundary (--reset-hour, local time) has passed since its last interaction, or that\n" +
			"was idle for --idle, gets a new sessionId and its transcript is archived as .reset.<ts>.\n" +
			"Records the interaction (lastInteractionAt). Use show for a read that changes nothing.",
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string) (any, error) {
		if hour < -1 || hour > 23 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--reset-hour %d: want 0-23, or -1 for no daily reset", hour)
		}
		if idle < 0 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--idle must not be negative")
		}
		if idle%time.Minute != 0 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--idle %s: the idle window is whole minutes (sessions.json counts minutes), such as 1m or 90m", idle)
		}
		policy := chatstore.ResetPolicy{Disabled: noAuto, DailyAtHour: hour, IdleMinutes: int(idle / time.Minute)}
		st, err := a.openStoreWith(chatstore.Options{Now: a.env.Now, Reset: &policy})
		if err != nil {
			return nil, err
		}
		e, fresh, err := st.Resolve(cmd.Context(), args[0])
		if err != nil {
			return nil, storeError(err)
		}
		key, _, err := st.Lookup(e.SessionID)
		if err != nil {
			key = args[0]
		}
		return map[string]any{"key": key, "fresh": fresh, "entry": e}, nil
	})
	def := chatstore.DefaultResetPolicy()
	cmd.Flags().IntVar(&hour, "reset-hour", def.DailyAtHour, "local hour (0-23) of the daily reset; -1: none")
	cmd.Flags().DurationVar(&idle, "idle", time.Duration(def.IdleMinutes)*time.Minute, "idle window after which a new session starts, a Go duration of whole minutes (90m, 2h); 0: none")
	cmd.Flags().BoolVar(&noAuto, "no-auto-reset", false, "never reset automatically (only create)")
	return cmd
}
