package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/node/membership"
)

// newLabAddNodeCmd starts a node that joins through the lab's supervisor,
// then adds it to the cluster (troop cluster add).
func newLabAddNodeCmd() *cobra.Command {
	var (
		dir, dc, rack string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "add-node --rack RACK [--dc DC]",
		Short: "Start a new node in a rack of the lab and add it to the cluster while it serves",
		Long: `add-node asks the lab's supervisor for a new position in the rack: a
redis-server and a node started with troop_join: true, at the middle of
the rack's widest token range. Then it adds the node to the cluster through
a member's admin API (as troop cluster add does), which streams the range
it takes over and switches the cluster to it. A rack the lab does not
have is added whole: its node owns the whole ring (token 0), streams every
key from one of the other racks, and counts in quorums from the switch
(docs/store.md, Adding a rack). In address mode (--netns)
the node gets its own network namespace and address, with --tls a
certificate of the lab's CA; the position lasts as long as the lab's
supervisor.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rack == "" {
				return errors.New("lab add-node: --rack RACK is required")
			}
			ctx := cmd.Context()
			c, err := lab.Dial(ctx, dir)
			if err != nil {
				return err
			}
			admin, err := labMemberAdmin(c, cmd, "")
			if err != nil {
				return fmt.Errorf("lab add-node: %w", err)
			}
			if dc == "" {
				dc = lab.DCName(1)
			}
			cur, err := clusterRequest(ctx, plainAdmin, http.MethodGet, admin, "/cluster/membership", nil)
			if err != nil {
				return fmt.Errorf("lab add-node: %w", err)
			}
			token, err := membership.SplitToken(cur.State.New, dc, rack)
			if err != nil {
				return fmt.Errorf("lab add-node: %w", err)
			}
			n, err := c.AddNode(ctx, dc, rack, token)
			if err != nil {
				return fmt.Errorf("lab add-node: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "started %s (dyn_listen %s, token %d); adding it to the cluster through %s\n", n.Name, n.DynListen, token, admin)
			rep, err := clusterRequest(ctx, plainAdmin, http.MethodPost, admin, "/cluster/add",
				url.Values{"addr": {n.DynListen}, "dc": {dc}, "rack": {rack}, "tokens": {strconv.FormatUint(uint64(token), 10)}})
			if rep != nil {
				printChange(cmd.OutOrStdout(), *rep, asJSON)
			}
			if err != nil {
				return fmt.Errorf("lab add-node: %w (the change stays under way: troop cluster resume or cancel --admin %s)", err, admin)
			}
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().StringVar(&rack, "rack", "", "the rack the node joins, e.g. rack1")
	cmd.Flags().StringVar(&dc, "dc", "", "its datacenter (default dc1)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the change's report as JSON")
	return cmd
}

// newLabRemoveNodeCmd removes a node from the cluster, then stops its
// processes through the supervisor.
func newLabRemoveNodeCmd() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "remove-node NODE",
		Short: "Remove a node from the cluster while it serves, then stop it and its redis-server",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := lab.Dial(ctx, dir)
			if err != nil {
				return err
			}
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			gone, err := st.Node(args[0])
			if err != nil {
				return fmt.Errorf("lab remove-node: %w", err)
			}
			admin, err := labMemberAdmin(c, cmd, gone.Name)
			if err != nil {
				return fmt.Errorf("lab remove-node: %w", err)
			}
			rep, err := clusterRequest(ctx, plainAdmin, http.MethodPost, admin, "/cluster/remove", url.Values{"addr": {gone.DynListen}})
			if rep != nil {
				printChange(cmd.OutOrStdout(), *rep, asJSON)
			}
			if err != nil {
				return fmt.Errorf("lab remove-node: %w", err)
			}
			for _, kind := range []lab.Proc{lab.NodeProc, lab.RedisProc} {
				if _, err := c.Stop(ctx, gone.Name, kind); err != nil {
					return fmt.Errorf("lab remove-node: removed from the cluster, but stopping its %s: %w", kind, err)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "removed %s from the cluster and stopped it\n", gone.Name)
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the change's report as JSON")
	return cmd
}

// labMemberAdmin is the admin address of a running node of the lab other
// than except.
func labMemberAdmin(c *lab.Client, cmd *cobra.Command, except string) (string, error) {
	st, err := c.Status(cmd.Context())
	if err != nil {
		return "", err
	}
	for _, n := range st.Nodes {
		if n.Name != except && n.NodeP.State == lab.Running {
			return n.StatsListen, nil
		}
	}
	return "", errors.New("no running node of the lab to ask")
}
