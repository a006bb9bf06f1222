package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/node/repair"
)

func init() { subcommands = append(subcommands, newRepairCmd) }

func newRepairCmd() *cobra.Command {
	var (
		nodeAddr, labDir string
		asJSON           bool
	)
	cmd := &cobra.Command{
		Use:   "repair (--node ADMIN_ADDR | --lab DIR)",
		Short: "Run an anti-entropy pass now and report what it compared and repaired",
		Long: `repair asks a node (over its admin API, POST /repair) to run one
anti-entropy pass: for every token range the node owns in its rack, each
replica of the datacenter builds a hash tree of its keys by scanning its
redis-server, the trees are compared, and every key whose replicas disagree
is copied from the replica with the newest version to the others, at the
node's troop_repair_keys_per_sec. Deleted and expired keys stay deleted.

With --lab, it runs a pass on every node of the first rack of each
datacenter of the lab in DIR, which covers every token range once.

It prints, per node, the keys compared, the keys that differed, the keys
repaired and the bytes the pass exchanged between nodes (docs/repair.md).
It exits non-zero when a pass fails or a key could not be repaired.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if (nodeAddr == "") == (labDir == "") {
				return errors.New("repair: give exactly one of --node ADMIN_ADDR and --lab DIR")
			}
			targets := []string{nodeAddr}
			if labDir != "" {
				st, err := lab.Load(labDir)
				if err != nil {
					return fmt.Errorf("repair: %w", err)
				}
				targets = repairTargets(st.Nodes)
			}
			ctx := cmd.Context()
			var reports []repair.Report
			var errs []error
			var stopped string
			for i, addr := range targets {
				rep, err := runRepair(ctx, addr)
				if ctx.Err() != nil {
					// Interrupted: the node's pass ends with the request
					// (what it repaired stays repaired); the rest never start.
					stopped = fmt.Sprintf("interrupted during the pass on %s", addr)
					if rest := targets[i+1:]; len(rest) > 0 {
						stopped += fmt.Sprintf("; not run on %s", strings.Join(rest, ", "))
					}
					break
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				reports = append(reports, rep)
				if rep.Failed > 0 {
					errs = append(errs, fmt.Errorf("repair: %s: %d keys could not be repaired (see its log)", rep.Node, rep.Failed))
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.Encode(reports)
			} else {
				printRepairTable(cmd.OutOrStdout(), reports)
			}
			if stopped != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "repair: %s\n", stopped)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringVar(&nodeAddr, "node", "", "admin address (stats_listen) of the node to run the pass on, e.g. 127.0.0.1:22222")
	cmd.Flags().StringVar(&labDir, "lab", "", "run a pass on the first rack's nodes of each datacenter of the lab in DIR")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the reports as JSON")
	return cmd
}

// repairTargets picks the admin addresses of the nodes of each
// datacenter's first rack (by name): together they own every token range
// of their datacenter once.
func repairTargets(nodes []lab.NodeStatus) []string {
	first := map[string]string{}
	for _, n := range nodes {
		if r, ok := first[n.DC]; !ok || n.Rack < r {
			first[n.DC] = n.Rack
		}
	}
	var out []string
	for _, n := range nodes {
		if first[n.DC] == n.Rack {
			out = append(out, n.StatsListen)
		}
	}
	sort.Strings(out)
	return out
}

func runRepair(ctx context.Context, admin string) (repair.Report, error) {
	var rep repair.Report
	req, err := client.NewAdminRequest(ctx, http.MethodPost, "http://"+admin+"/repair")
	if err != nil {
		return rep, fmt.Errorf("repair: --node %q: %w", admin, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return rep, fmt.Errorf("repair: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("repair: %s: %s: %s", admin, res.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		return rep, fmt.Errorf("repair: %s: not a repair report: %w", admin, err)
	}
	return rep, nil
}

func printRepairTable(w io.Writer, reports []repair.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tranges\tkeys compared\tdiffering\trepaired\tfailed\tbytes\ttook\t")
	var total repair.Report
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Node, r.Segments, r.KeysCompared, r.Differing, r.Repaired, r.Failed, r.Bytes, r.Took)
		total.Segments += r.Segments
		total.KeysCompared += r.KeysCompared
		total.Differing += r.Differing
		total.Repaired += r.Repaired
		total.Failed += r.Failed
		total.Bytes += r.Bytes
	}
	if len(reports) > 1 {
		fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t\t\n", total.Segments, total.KeysCompared, total.Differing, total.Repaired, total.Failed, total.Bytes)
	}
	tw.Flush()
	for _, r := range reports {
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "%s: skipped replica %s\n", r.Node, s)
		}
	}
}
