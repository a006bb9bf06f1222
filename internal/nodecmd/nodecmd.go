// Package nodecmd is the node verb: one store node in front of one
// redis-server. Both binaries run it: troop as `troop node`, and troop-node,
// the node alone, which links none of the lab's, the chaos monkey's or the
// report's dependencies (Kubernetes, Docker, SQLite).
package nodecmd

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/logflag"
	"github.com/troop-lab/troop/node"
	"github.com/troop-lab/troop/topology"
)

// New returns the node verb's command, named node.
func New() *cobra.Command {
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
			if err := provideSeeds(cmd.Context(), cfg); err != nil {
				return fmt.Errorf("node: %s: %w", configPath, err)
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

// provideSeeds sets the seeds of a config whose dyn_seed_provider is
// dns_provider or florida_provider to what its provider answers now, and
// checks them as dyn_seeds are checked.
func provideSeeds(ctx context.Context, cfg *topology.Config) error {
	if cfg.SeedProvider == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	get := func(ctx context.Context, url string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		return client.Fetch(req)
	}
	seeds, err := topology.ProvidedSeeds(ctx, cfg, topology.SeedLookup{
		Getenv: os.Getenv, LookupTXT: net.DefaultResolver.LookupTXT, Get: get})
	if err != nil {
		return err
	}
	cfg.Seeds = seeds
	return cfg.Validate()
}
