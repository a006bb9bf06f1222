package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/lab"
)

func init() { subcommands = append(subcommands, newLabCmd) }

const defaultLabDir = ".troop/lab"

func newLabCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run a local cluster of troop nodes and redis-servers",
		Long: `lab runs a local troop cluster as real processes: one redis-server and one
troop node per position of a datacenters x racks x nodes shape, under a
supervisor that, like an Auto Scaling Group, replaces any process that dies
without being asked to. Configs, data and logs live under --dir.

With up --engine dynomite the nodes are Netflix's Dynomite instead, its own
binary with config files in its own format, one per rack over its own
redis-server, under the same supervisor: troop run --lab, troop bench and
troop chaos then act on Dynomite as on troop's nodes.

By default every process listens on 127.0.0.1. With up --netns (address
mode, root only) each position lives in its own network namespace with its
own address on a bridge the lab creates, so that network faults (troop chaos
partition, loss, delay) can come between nodes.`,
	}
	cmd.AddCommand(newLabUpCmd(), newLabDownCmd(), newLabStatusCmd(), newLabEnvCmd(),
		newLabActCmd("kill", "SIGKILL a node (or its redis-server); the supervisor replaces it after the delay"),
		newLabActCmd("stop", "Stop a node (or its redis-server) and keep it down until start"),
		newLabActCmd("start", "Start a stopped node (or its redis-server) and wait until it answers"),
		newLabAddNodeCmd(), newLabRemoveNodeCmd(),
		newLabSuperviseCmd())
	return cmd
}

func addDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", defaultLabDir, "directory of the lab's configs, data, logs and state")
}

func newLabUpCmd() *cobra.Command {
	var (
		spec  lab.Spec
		shape = lab.DefaultShape
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a lab and return once every process answers PING and the nodes are connected",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec.Shape = shape
			st, already, err := lab.Up(cmd.Context(), spec)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if already {
				fmt.Fprintf(out, "lab already running in %s with shape %s\n", st.Dir, st.Shape)
				return nil
			}
			var nodes []lab.Node
			for _, n := range st.Nodes {
				nodes = append(nodes, n.Node)
			}
			if err := lab.WaitMeshed(cmd.Context(), nodes, 20*time.Second); err != nil {
				return fmt.Errorf("%w (the lab is up: troop lab status --dir %s; troop lab down --dir %s)", err, st.Dir, st.Dir)
			}
			if err := st.WriteTable(out); err != nil {
				return err
			}
			fmt.Fprintf(out, "\nuse it from a shell with: eval \"$(troop lab env --dir %s)\"\n", st.Dir)
			return nil
		},
	}
	addDirFlag(cmd, &spec.Dir)
	f := cmd.Flags()
	f.IntVar(&shape.DCs, "dcs", shape.DCs, "number of datacenters")
	f.IntVar(&shape.Racks, "racks", shape.Racks, "racks per datacenter (each rack holds a full copy)")
	f.IntVar(&shape.NodesPerRack, "nodes-per-rack", shape.NodesPerRack, "nodes per rack (they split the token ring)")
	f.DurationVar(&spec.ReplaceAfter, "replace-after", 3*time.Second, "delay before the supervisor replaces a process that died")
	f.StringVar(&spec.ReadConsistency, "read-consistency", "DC_ONE", "nodes' read consistency: DC_ONE, DC_QUORUM or DC_SAFE_QUORUM")
	f.StringVar(&spec.WriteConsistency, "write-consistency", "DC_ONE", "nodes' write consistency: DC_ONE, DC_QUORUM or DC_SAFE_QUORUM")
	f.StringVar(&spec.LogFormat, "log-format", "text", "format of the supervisor's and the nodes' logs: text (logfmt) or json")
	f.BoolVar(&spec.TLS, "tls", false, "encrypt the peer links: make a CA (DIR/tls/ca.crt) and a certificate per node, and run the nodes with secure_server_option: all (mutual TLS)")
	f.StringVar(&spec.Engine, "engine", lab.EngineTroop, "what the nodes run: troop, or dynomite (Dynomite's own binary, from $TROOP_DYNOMITE, PATH or scripts/dynomite's build, with config files in its format)")
	f.BoolVar(&spec.Netns, "netns", false, "address mode: each node and its redis-server in its own network namespace, with its own address on a bridge of the lab's (root only; network faults need it)")
	return cmd
}

func newLabDownCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop every process of the lab (logs and data stay)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			msg, err := lab.Down(cmd.Context(), dir)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	return cmd
}

func newLabStatusCmd() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show which processes of the lab are alive, their PIDs, ports and restarts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := lab.Inspect(cmd.Context(), dir)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return st.WriteTable(cmd.OutOrStdout())
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON (the shape of lab.json)")
	return cmd
}

func newLabEnvCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print TROOP_NODES, TROOP_STATS, TROOP_REDIS and TROOP_LAB for eval in a shell",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lines, err := lab.Env(dir)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(lines, "\n"))
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	return cmd
}

// newLabActCmd builds kill, stop and start, which differ only in the
// request they send to the supervisor.
func newLabActCmd(verb, short string) *cobra.Command {
	var (
		dir   string
		redis bool
	)
	cmd := &cobra.Command{
		Use:   verb + " NODE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := lab.Dial(cmd.Context(), dir)
			if err != nil {
				return err
			}
			kind := lab.NodeProc
			if redis {
				kind = lab.RedisProc
			}
			act := map[string]func() (string, error){
				"kill":  func() (string, error) { return c.Kill(cmd.Context(), args[0], kind) },
				"stop":  func() (string, error) { return c.Stop(cmd.Context(), args[0], kind) },
				"start": func() (string, error) { return c.Start(cmd.Context(), args[0], kind) },
			}[verb]
			msg, err := act()
			if err != nil {
				return fmt.Errorf("lab %s %s: %w", verb, args[0], err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&redis, "redis", false, "act on the node's redis-server instead of the node")
	return cmd
}

// newLabSuperviseCmd is the detached supervisor that lab up starts.
func newLabSuperviseCmd() *cobra.Command {
	var (
		dir     string
		readyFD int
	)
	cmd := &cobra.Command{
		Use:    "supervise",
		Short:  "Run a lab's supervisor in the foreground (started by lab up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ready *os.File
			if readyFD > 0 {
				ready = os.NewFile(uintptr(readyFD), "ready")
			}
			if ready == nil {
				return lab.Supervise(cmd.Context(), dir, nil)
			}
			return lab.Supervise(cmd.Context(), dir, ready)
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().IntVar(&readyFD, "ready-fd", 0, "file descriptor on which to report readiness")
	return cmd
}
