// Command troop-node runs one store node, as `troop node` does, and nothing
// else: it links the node and its admin API, not the lab, the chaos
// monkey's backends (Kubernetes, Docker) or the run's database (SQLite), so
// it is a fraction of troop's size and build time. The lab's nodes, the
// container image and the Kubernetes manifests run it.
//
//	troop-node --config FILE [--test-conf] [--log-format text|json] [--log-level LEVEL]
package main

import (
	"fmt"
	"os"

	promversion "github.com/prometheus/common/version"

	"github.com/troop-lab/troop/internal/nodecmd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	promversion.Version = version // troop_build_info's version label, on /metrics
	cmd := nodecmd.New()
	cmd.Use = "troop-node --config FILE"
	cmd.Version = version
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "troop-node:", err)
		os.Exit(1)
	}
}
