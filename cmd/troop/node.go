package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/node"
	"github.com/troop-lab/troop/topology"
)

func init() { subcommands = append(subcommands, newNodeCmd) }

func newNodeCmd() *cobra.Command {
	var (
		configPath string
		testConf   bool
		logLevel   string
	)
	cmd := &cobra.Command{
		Use:   "node --config FILE",
		Short: "Run a store node in front of a redis-server",
		Long: `Run one store node: a Redis-protocol front end in front of one redis-server,
sharding keys on Dynomite's token ring and replicating them across racks and
datacenters at the configured consistency level.

The config file is Dynomite's YAML format (docs/config.md). Keys troop does
not implement are rejected with their line number, never ignored.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if configPath == "" {
				return fmt.Errorf("node: --config FILE is required")
			}
			cfg, err := topology.Load(configPath)
			if err != nil {
				return err
			}
			if testConf {
				fmt.Printf("%s: configuration is valid (node %s, %s/%s)\n", configPath, cfg.Name, cfg.Datacenter, cfg.Rack)
				return nil
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("node: --log-level: %v", err)
			}
			if os.Getenv("GOGC") == "" {
				// A node's live heap is small (requests in flight are bounded), so
				// the default GC pace spends a tenth of its CPU collecting: trade
				// a few MB of memory for that CPU. GOGC in the environment wins.
				debug.SetGCPercent(400)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			n, err := node.New(cfg, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go node.ManageProcessMemory(ctx, cfg.MaxMemoryMB, log)
			return n.Serve(ctx)
		},
	}
	cmd.Flags().StringVarP(&configPath, "config", "c", "", "node config file (Dynomite YAML)")
	cmd.Flags().BoolVarP(&testConf, "test-conf", "t", false, "check the config file and exit")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
