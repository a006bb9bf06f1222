package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos"
)

// newChaosStopCmd and newChaosResumeCmd are the global stop's verbs. With
// --server they ask a running troop chaos serve over HTTP (with the
// config's token); without, they set the stop in the records database
// themselves, and stop reverts the leases in its lease directory. Either
// way the stop is in the database, so it holds across restarts and for
// every monkey sharing it.
func newChaosStopCmd() *cobra.Command   { return newChaosSwitchCmd(true) }
func newChaosResumeCmd() *cobra.Command { return newChaosSwitchCmd(false) }

func newChaosSwitchCmd(stop bool) *cobra.Command {
	var (
		config, db, server string
		opts               backendOptions
	)
	verb, short := "resume", "End the global stop: kills may happen again"
	if stop {
		verb, short = "stop", "Global stop: revert every active fault and block new ones until resume"
	}
	cmd := &cobra.Command{
		Use:   verb + " --config FILE [--server URL | --db FILE --lab DIR]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			if server != "" {
				cfg, err := chaos.LoadConfig(config)
				if err != nil {
					return err
				}
				stopped, err := postSwitch(ctx, server, verb, cfg.Token)
				if err != nil {
					return fmt.Errorf("chaos %s: %w", verb, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: stopped %v\n", server, stopped)
				return nil
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			m, closeDB, err := openMonkey(config, db, opts, 0, log)
			if err != nil {
				return fmt.Errorf("chaos %s: %w", verb, err)
			}
			defer closeDB()
			if stop {
				err = m.Stop(ctx)
			} else {
				err = m.Resume(ctx)
			}
			if err != nil {
				return fmt.Errorf("chaos %s: %w", verb, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: stopped %v\n", m.Records.Path(), m.Stopped())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the chaos config (its token, db and lease directory)")
	f.StringVar(&server, "server", "", "a running troop chaos serve, e.g. http://"+DefaultChaosListen)
	f.StringVar(&db, "db", "", "the records database (default: the config's db key)")
	addBackendFlags(f, &opts)
	return cmd
}

// postSwitch posts to /api/v1/stop or /resume of a serve.
func postSwitch(ctx context.Context, server, verb, token string) (bool, error) {
	if token == "" {
		return false, errors.New("the config has no token; the server refuses POSTs without one")
	}
	url := strings.TrimSuffix(server, "/") + "/api/v1/" + verb
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var r struct {
		Stopped bool `json:"stopped"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return false, fmt.Errorf("%s: bad answer %q", url, body)
	}
	return r.Stopped, nil
}
