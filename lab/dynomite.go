package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The engines a lab's nodes run: troop's own nodes, or Netflix's Dynomite
// (its own binary, with config files in its own format), for comparing the
// two under the same supervisor, faults and checks.
const (
	EngineTroop    = "troop"
	EngineDynomite = "dynomite"
)

// ParseEngine accepts troop or dynomite ("" is troop).
func ParseEngine(s string) (string, error) {
	switch strings.ToLower(s) {
	case "", EngineTroop:
		return EngineTroop, nil
	case EngineDynomite:
		return EngineDynomite, nil
	}
	return "", fmt.Errorf("unknown engine %q (want troop or dynomite)", s)
}

// FindDynomite resolves Dynomite's binary: path if given, else
// $TROOP_DYNOMITE, else dynomite on PATH, else the one scripts/dynomite
// built from Dynomite's source archive into troop's cache
// ($XDG_CACHE_HOME/troop/dynomite-COMMIT/dynomite, or ~/.cache/troop/...).
// The error says in one sentence what is missing and where to put it.
func FindDynomite(path string) (string, error) {
	if path == "" {
		path = os.Getenv("TROOP_DYNOMITE")
	}
	if path != "" {
		p, err := exec.LookPath(path)
		if err != nil {
			return "", fmt.Errorf("Dynomite binary %s is not an executable file: %w", path, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("dynomite"); err == nil {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err == nil {
		built, _ := filepath.Glob(filepath.Join(cache, "troop", "dynomite-*", "dynomite"))
		sort.Strings(built)
		for i := len(built) - 1; i >= 0; i-- {
			if st, err := os.Stat(built[i]); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return built[i], nil
			}
		}
	}
	return "", errors.New("no Dynomite binary: put one on PATH or its path in TROOP_DYNOMITE, or put Dynomite's source archive (dynomite-COMMIT.tar.gz) in ../shared/peers beside troop's clone and build it with scripts/dynomite (make test does)")
}

// DynomiteConfig renders a position's config in Dynomite's own format, for
// Dynomite's binary: the keys troop's NodeConfig shares with it, and peer
// links in the clear (Dynomite's encryption is not the lab's TLS).
func DynomiteConfig(n Node, all []Node, readConsistency, writeConsistency string) []byte {
	var b strings.Builder
	writeDynomiteKeys(&b, n, all, readConsistency, writeConsistency)
	fmt.Fprintf(&b, "  dyn_seed_provider: simple_provider\n")
	fmt.Fprintf(&b, "  secure_server_option: none\n")
	return []byte(b.String())
}

// DynomiteCommand is the command line of a position's Dynomite: its config,
// its log on stderr (the supervisor's node.log) at Dynomite's default
// verbosity less one, which leaves out a line per connection.
func DynomiteCommand(bin string, n Node) []string {
	return []string{bin, "--conf-file", n.Config, "--verbosity", "4"}
}

// meshProbe is the key a lab writes through each Dynomite node to see that
// it reaches every replica.
func meshProbe(n Node) string { return "troop:lab:meshed:" + n.Name }

// DynomiteMeshed says what keeps a Dynomite lab from serving quorum
// requests, "" when nothing: Dynomite's /cluster_describe does not say
// whether a peer is connected, so a write through each node must reach
// every redis-server of the lab (Dynomite replicates every write to every
// rack, whatever its level); the probe is deleted through the node after.
func DynomiteMeshed(ctx context.Context, nodes []Node) string {
	for _, n := range nodes {
		key := meshProbe(n)
		if reply, err := command(ctx, n.Listen, "SET", key, "1"); err != nil || reply != "+OK" {
			return fmt.Sprintf("%s does not take a write yet (%s)", n.Name, replyOrErr(reply, err))
		}
		for _, r := range nodes {
			if reply, err := command(ctx, r.Redis, "EXISTS", key); err != nil || reply != ":1" {
				return fmt.Sprintf("a write through %s has not reached %s's redis-server (%s)", n.Name, r.Name, replyOrErr(reply, err))
			}
		}
	}
	for _, n := range nodes {
		command(ctx, n.Listen, "DEL", meshProbe(n))
	}
	return ""
}

func replyOrErr(reply string, err error) string {
	if err != nil {
		return err.Error()
	}
	return "it answered " + reply
}

// waitDynomiteMeshed waits until DynomiteMeshed says nothing, for at most
// within.
func waitDynomiteMeshed(ctx context.Context, nodes []Node, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		missing := DynomiteMeshed(ctx, nodes)
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Dynomite cluster did not connect within %v: %s", within, missing)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
