package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/node/reconfig"
)

func init() { subcommands = append(subcommands, newClusterCmd) }

func newClusterCmd() *cobra.Command {
	var (
		admin, caFile string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Add, remove or replace a node while the cluster serves; resume, cancel or show the change under way",
		Long: `cluster changes a running cluster's membership through any member's
admin API (POST /cluster/...; the token of $TROOP_ADMIN_TOKEN when the
node has one). A change streams the token ranges that move to their new
owner, copies writes to a moving key to its other owner meanwhile, switches
the cluster to the new members, and has the nodes it touched drop the keys
they no longer own; each verb waits for the change to end.

A new node starts with troop_join: true and the cluster as its dyn_seeds;
it answers clients TRYAGAIN until a change names it. A change that stops
part way (a node died) stays under way: resume it, or cancel it, through
any member (docs/store.md, Membership changes).`,
	}
	cmd.PersistentFlags().StringVar(&admin, "admin", "", "admin address (stats_listen) of any member, e.g. 127.0.0.1:22222")
	cmd.PersistentFlags().StringVar(&caFile, "cacert", "", "call the admin API over HTTPS (a node with troop_tls_admin), trusting the CA certificates of this PEM file")
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print the answer as JSON")
	run := func(what string, args func(cmd *cobra.Command, pos []string) (url.Values, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, pos []string) error {
			if admin == "" {
				return fmt.Errorf("cluster %s: --admin ADDR is required (the admin address of any member)", what)
			}
			q, err := args(cmd, pos)
			if err != nil {
				return fmt.Errorf("cluster %s: %w", what, err)
			}
			ac, err := newAdminClient(caFile)
			if err != nil {
				return fmt.Errorf("cluster %s: %w", what, err)
			}
			method, path := http.MethodPost, "/cluster/"+what
			if what == "status" {
				method, path = http.MethodGet, "/cluster/membership"
			}
			rep, err := clusterRequest(cmd.Context(), ac, method, admin, path, q)
			if rep != nil {
				printChange(cmd.OutOrStdout(), *rep, asJSON)
			}
			if err != nil {
				return fmt.Errorf("cluster %s: %w", what, err)
			}
			return nil
		}
	}
	none := func(*cobra.Command, []string) (url.Values, error) { return nil, nil }

	var rack, dc, tokens string
	add := &cobra.Command{
		Use:   "add PEER_ADDR --rack RACK [--dc DC] [--tokens T,...]",
		Short: "Add the node at PEER_ADDR (its dyn_listen; started with troop_join) to a rack",
		Args:  cobra.ExactArgs(1),
		RunE: run("add", func(_ *cobra.Command, pos []string) (url.Values, error) {
			if rack == "" {
				return nil, errors.New("--rack RACK is required")
			}
			return url.Values{"addr": {pos[0]}, "rack": {rack}, "dc": {dc}, "tokens": {tokens}}, nil
		}),
	}
	add.Flags().StringVar(&rack, "rack", "", "the rack the node joins (one its datacenter does not have: a new rack, whose node owns the whole ring)")
	add.Flags().StringVar(&dc, "dc", "", "its datacenter (default: the asked member's)")
	add.Flags().StringVar(&tokens, "tokens", "", "its tokens, comma-separated (default: the middle of the rack's widest range; 0 in a new rack)")

	remove := &cobra.Command{
		Use:   "remove PEER_ADDR",
		Short: "Remove the node at PEER_ADDR; its ranges go to the other nodes of its rack",
		Args:  cobra.ExactArgs(1),
		RunE: run("remove", func(_ *cobra.Command, pos []string) (url.Values, error) {
			return url.Values{"addr": {pos[0]}}, nil
		}),
	}
	var replTokens string
	replace := &cobra.Command{
		Use:   "replace OLD_PEER_ADDR NEW_PEER_ADDR [--tokens T,...]",
		Short: "Replace a node by another (started with troop_join), which takes its tokens",
		Args:  cobra.ExactArgs(2),
		RunE: run("replace", func(_ *cobra.Command, pos []string) (url.Values, error) {
			return url.Values{"old": {pos[0]}, "addr": {pos[1]}, "tokens": {replTokens}}, nil
		}),
	}
	replace.Flags().StringVar(&replTokens, "tokens", "", "the new node's tokens, comma-separated (default: the old node's)")
	cmd.AddCommand(add, remove, replace,
		&cobra.Command{Use: "resume", Short: "Finish the membership change under way, from the newest step any member holds", Args: cobra.NoArgs, RunE: run("resume", none)},
		&cobra.Command{Use: "cancel", Short: "Roll the membership change under way back to the old members", Args: cobra.NoArgs, RunE: run("cancel", none)},
		&cobra.Command{Use: "status", Short: "Show the membership step a member holds and the ranges its change moves", Args: cobra.NoArgs, RunE: run("status", none)},
	)
	return cmd
}

// adminClient calls a node's admin API: over plain HTTP, or over HTTPS
// for a node with troop_tls_admin.
type adminClient struct {
	scheme string
	http   *http.Client
}

// plainAdmin is the admin API over plain HTTP, as a lab's nodes serve it.
var plainAdmin = adminClient{scheme: "http", http: http.DefaultClient}

// newAdminClient is plainAdmin without caFile, else HTTPS trusting the CA
// certificates of the PEM file caFile.
func newAdminClient(caFile string) (adminClient, error) {
	if caFile == "" {
		return plainAdmin, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return adminClient{}, fmt.Errorf("--cacert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return adminClient{}, fmt.Errorf("--cacert %s holds no PEM certificate", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return adminClient{scheme: "https", http: &http.Client{Transport: tr}}, nil
}

// clusterRequest calls a membership endpoint and decodes its report; the
// report comes back with the error too when the node gave one.
func clusterRequest(ctx context.Context, ac adminClient, method, admin, path string, q url.Values) (*reconfig.Report, error) {
	for k, v := range q {
		if len(v) == 1 && v[0] == "" {
			delete(q, k)
		}
	}
	u := ac.scheme + "://" + admin + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := client.NewAdminRequest(ctx, method, u)
	if err != nil {
		return nil, fmt.Errorf("--admin %q: %w", admin, err)
	}
	res, err := ac.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var rep reconfig.Report
	if jerr := json.Unmarshal(body, &rep); jerr != nil {
		return nil, fmt.Errorf("%s: %s: %s", admin, res.Status, strings.TrimSpace(string(body)))
	}
	if res.StatusCode != http.StatusOK {
		return &rep, fmt.Errorf("%s: %s: %s", admin, res.Status, rep.Error)
	}
	return &rep, nil
}

func printChange(w io.Writer, rep reconfig.Report, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
		return
	}
	s := rep.State
	change := "none"
	if c := s.Change; c != nil {
		change = string(c.Kind) + " " + strings.TrimSpace(c.Gone+" "+c.Node)
	}
	fmt.Fprintf(w, "epoch %d, %s, change: %s\n", s.Epoch, s.Phase, change)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "member\tdc\track\ttokens\t")
	for _, m := range s.Routing() {
		toks := make([]string, len(m.Tokens))
		for i, t := range m.Tokens {
			toks[i] = fmt.Sprint(t)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", m.Addr, m.DC, m.Rack, strings.Join(toks, ","))
	}
	tw.Flush()
	for _, mv := range rep.Moves {
		from := mv.From
		if from == "" {
			from = "(a new rack: one of the other racks)"
		}
		fmt.Fprintf(w, "moves %s/%s (%d, %d]: %s -> %s\n", mv.DC, mv.Rack, mv.Range.Lo, mv.Range.Hi, from, mv.To)
	}
	for _, m := range rep.Missed {
		fmt.Fprintf(w, "missed: %s\n", m)
	}
}
