package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/internal/logflag"
	"github.com/troop-lab/troop/node"
	"github.com/troop-lab/troop/topology"
)

func init() { subcommands = append(subcommands, newNodeCmd) }

func newNodeCmd() *cobra.Command {
	var (
		configPath string
		testConf   bool
		logFlags   *logflag.Flags
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
			log, err := logFlags.Logger(os.Stderr)
			if err != nil {
				return fmt.Errorf("node: %v", err)
			}
			cfg, err := topology.Load(configPath)
			if err != nil {
				return err
			}
			if testConf {
				fmt.Printf("%s: configuration is valid (node %s, %s/%s)\n", configPath, cfg.Name, cfg.Datacenter, cfg.Rack)
				return nil
			}
			if os.Getenv("GOGC") == "" {
				// A node's live heap is small (requests in flight are bounded), so
				// the default GC pace spends a tenth of its CPU collecting: trade
				// a few MB of memory for that CPU. GOGC in the environment wins.
				debug.SetGCPercent(400)
			}
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
	logFlags = logflag.Add(cmd.Flags())
	return cmd
}
