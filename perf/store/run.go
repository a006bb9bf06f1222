package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/troop-lab/troop/internal/certs"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/topology"
)

// startOneProxy starts what the single-proxy figures compare: a
// redis-server, nutcracker and a one-rack troop node in front of it (with
// pprof on its admin port if asked), and preloads the keys straight into
// the redis-server, which the three share. It returns them as targets,
// direct first, and the redis-server's address.
func startOneProxy(ctx context.Context, cfg config, ps *procSet, bins binaries, pprof bool) ([]*target, string, error) {
	redis, redisAddr, err := startRedis(ctx, ps, bins.redisServer, "redis")
	if err != nil {
		return nil, "", err
	}
	nc, ncAddr, err := startNutcracker(ctx, ps, bins.nutcracker, redisAddr)
	if err != nil {
		return nil, "", err
	}
	nodeCfg, err := nodeConfig("troop-node", "rack1", redisAddr, pprof)
	if err != nil {
		return nil, "", err
	}
	node, err := startNode(ctx, ps, bins.troop, nodeCfg)
	if err != nil {
		return nil, "", err
	}
	if err := preload(ctx, []string{redisAddr}, nil, cfg.Keys, nil); err != nil {
		return nil, "", err
	}
	return []*target{
		{name: "direct", addrs: []string{redisAddr}, redis: []*proc{redis}},
		{name: "nutcracker", addrs: []string{ncAddr}, proxies: []*proc{nc}, redis: []*proc{redis}},
		{name: "troop-node", addrs: []string{nodeCfg.Listen}, proxies: []*proc{node}, redis: []*proc{redis}, admin: []string{nodeCfg.StatsListen}},
	}, redisAddr, nil
}

// proxyExperiment is experiment 1: direct redis-server, nutcracker and a
// one-rack troop node, all in front of the same redis-server, interleaved.
func proxyExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	targets, redisAddr, err := startOneProxy(ctx, cfg, ps, bins, cfg.Pprof != "")
	if err != nil {
		return err
	}
	if cfg.Anchor {
		if err := preloadTroopBench(ctx, cfg, bins.troop, redisAddr); err != nil {
			return err
		}
	}
	direct, redis := targets[0], targets[0].redis
	if bins.base != "" { // the base build's node in front of the same redis-server
		baseCfg, err := nodeConfig("base_troop-node", "rack1", redisAddr, false)
		if err != nil {
			return err
		}
		base, err := startNode(ctx, ps, bins.base, baseCfg)
		if err != nil {
			return err
		}
		targets = append(targets, &target{name: "base_troop-node", addrs: []string{baseCfg.Listen}, proxies: []*proc{base}, redis: redis, admin: []string{baseCfg.StatsListen}})
	}
	for _, p := range cfg.Pipelines {
		for n := 1; n <= cfg.Rounds; n++ {
			var directOps int64
			for _, t := range roundOrder(targets, n, 1) {
				r := measure(ctx, cfg, "proxy", t, p, n)
				res.add(r, log)
				if t == direct {
					directOps = int64(r.OpsPerSec * time.Duration(cfg.Duration).Seconds())
				}
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if cfg.Anchor {
				res.add(measureAnchor(ctx, cfg, bins.redisBenchmark, direct, p, n, max(directOps, 1000)), log)
				res.add(measureTroopBench(ctx, cfg, bins.troop, direct, p, n, max(directOps, 1000)), log)
			}
		}
		if cfg.Pprof != "" {
			if err := profile(ctx, cfg, targets[2], p, fmt.Sprintf("troop-node-P%d.pprof", p)); err != nil {
				res.note("profile of troop-node at P=%d failed: %v", p, err)
			}
		}
	}
	return ctx.Err()
}

// roundOrder is the order targets are measured in round n (from 1), in
// groups of size that stay together. The first window of a round did fewer
// operations at DC_ONE P=10, whichever build had it, so each group goes
// first in turn. And in a run of one build against itself, the node measured
// right after nutcracker in every round cost 5% more than the same build
// measured after it (1.011 to 1.107 in all 6 rounds at P=1), so every other
// round runs the groups backwards and each has another one before it.
func roundOrder[T any](targets []T, n, size int) []T {
	groups := len(targets) / size
	k := (n - 1) / 2 % groups * size
	out := append(slices.Clone(targets[k:]), targets[:k]...)
	if n%2 == 0 {
		for i, j := 0, groups-1; i < j; i, j = i+1, j-1 {
			for x := 0; x < size; x++ {
				out[i*size+x], out[j*size+x] = out[j*size+x], out[i*size+x]
			}
		}
	}
	return out
}

// clusterExperiment is experiment 2: three racks, one node and one
// redis-server each, the load spread over the three nodes, at DC_ONE and
// DC_QUORUM, interleaved. With a base build, the same cluster of it runs
// beside, its targets (base_dc_one, base_dc_quorum) interleaved with these.
func clusterExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	targets, err := startCluster(ctx, cfg, ps, bins.redisServer, bins.troop, "", false, consistency.DCOne)
	if err != nil {
		return err
	}
	if bins.base != "" {
		base, err := startCluster(ctx, cfg, ps, bins.redisServer, bins.base, "base_", false, consistency.DCOne)
		if err != nil {
			return err
		}
		targets = append(targets, base...)
	}
	for _, p := range cfg.Pipelines {
		for n := 1; n <= cfg.Rounds; n++ {
			// With a base build, the builds take turns at going first, each
			// with its DC_ONE and DC_QUORUM together.
			for _, t := range roundOrder(targets, n, 2) {
				res.add(measure(ctx, cfg, "cluster", t, p, n), log)
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		if cfg.Pprof != "" {
			for _, t := range targets {
				if err := profile(ctx, cfg, t, p, fmt.Sprintf("cluster-%s-P%d-node1.pprof", t.name, p)); err != nil {
					res.note("profile of %s at P=%d failed: %v", t.name, p, err)
				}
			}
		}
	}
	return ctx.Err()
}

// startCluster starts three racks of troop, a node and a redis-server
// each, preloads the keys, and returns its targets at DC_ONE and
// DC_QUORUM, named with prefix. With encrypt, the client and peer links
// are TLS, with a CA made for the run. level is the nodes' configured
// level, what a client that does not set its own gets.
func startCluster(ctx context.Context, cfg config, ps *procSet, redisServer, troop, prefix string, encrypt bool, level consistency.Level) ([]*target, error) {
	const racks = 3
	var cfgs []*topology.Config
	var redises, nodes []*proc
	var addrs, admin, redisAddrs []string
	for i := 1; i <= racks; i++ {
		redis, redisAddr, err := startRedis(ctx, ps, redisServer, fmt.Sprintf("%sredis%d", prefix, i))
		if err != nil {
			return nil, err
		}
		c, err := nodeConfig(fmt.Sprintf("%snode%d", prefix, i), fmt.Sprintf("rack%d", i), redisAddr, cfg.Pprof != "")
		if err != nil {
			return nil, err
		}
		c.ReadConsistency, c.WriteConsistency = level, level
		redises, cfgs, redisAddrs = append(redises, redis), append(cfgs, c), append(redisAddrs, redisAddr)
		addrs, admin = append(addrs, c.Listen), append(admin, c.StatsListen)
	}
	linkSeeds(cfgs)
	var clientTLS *tls.Config
	if encrypt {
		var err error
		if clientTLS, err = encryptCluster(filepath.Join(ps.dir, prefix+"tls"), cfgs); err != nil {
			return nil, err
		}
	}
	for _, c := range cfgs {
		node, err := startNode(ctx, ps, troop, c)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, node)
	}
	if err := waitPeers(ctx, nodes, admin); err != nil {
		return nil, err
	}
	// Preload through the nodes at DC_QUORUM, so that every rack holds the
	// keys, with their versions, before the first window.
	quorum := [][]string{{"TROOP", "CONSISTENCY", "DC_QUORUM"}}
	if err := preload(ctx, addrs, clientTLS, cfg.Keys, quorum); err != nil {
		return nil, err
	}
	return []*target{
		{name: prefix + "dc_one", addrs: addrs, setup: [][]string{{"TROOP", "CONSISTENCY", "DC_ONE"}}, proxies: nodes, redis: redises, redisAddrs: redisAddrs, admin: admin, tls: clientTLS},
		{name: prefix + "dc_quorum", addrs: addrs, setup: quorum, proxies: nodes, redis: redises, redisAddrs: redisAddrs, admin: admin, tls: clientTLS},
	}, nil
}

// encryptCluster makes a CA and a certificate per node in dir, turns on
// TLS on the nodes' client listeners and every peer link, and answers the
// load's client TLS config.
func encryptCluster(dir string, cfgs []*topology.Config) (*tls.Config, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ca, err := certs.NewCA("perf/store CA")
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	for _, c := range cfgs {
		leaf, err := ca.Issue(c.Name, "127.0.0.1")
		if err != nil {
			return nil, err
		}
		c.TLSCert, c.TLSKey, c.TLSCA = filepath.Join(dir, c.Name+".crt"), filepath.Join(dir, c.Name+".key"), caFile
		if err := leaf.Write(c.TLSCert, c.TLSKey); err != nil {
			return nil, err
		}
		c.SecureServerOption, c.TLSClient = topology.SecureAll, true
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, nil
}

// tlsExperiment measures what TLS costs: the same three-rack cluster at
// DC_QUORUM, plain and with its client and peer links over TLS, interleaved.
func tlsExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	var targets []*target
	for _, encrypt := range []bool{false, true} {
		prefix := ""
		if encrypt {
			prefix = "tls_"
		}
		ts, err := startCluster(ctx, cfg, ps, bins.redisServer, bins.troop, prefix, encrypt, consistency.DCOne)
		if err != nil {
			return err
		}
		targets = append(targets, ts[1]) // dc_quorum
	}
	for _, p := range cfg.Pipelines {
		for n := 1; n <= cfg.Rounds; n++ {
			for _, t := range targets {
				res.add(measure(ctx, cfg, "tls", t, p, n), log)
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
	}
	return ctx.Err()
}

// prepareTroop builds the troop binary from the working tree, or from the
// git revision rev when it is not "", in dir, and says which source it was.
func prepareTroop(ctx context.Context, rev, dir string, out io.Writer) (bin, revision string, err error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", "", err
	}
	src := root
	if rev != "" {
		fmt.Fprintf(out, "exporting %s ...\n", rev)
		if src, revision, err = exportRev(ctx, root, rev, filepath.Join(dir, "src")); err != nil {
			return "", "", err
		}
	} else {
		revision = gitRevision(ctx, root)
	}
	fmt.Fprintln(out, "building ./cmd/troop ...")
	bin, err = buildTroop(ctx, src, dir)
	return bin, revision, err
}

// run is the whole benchmark. Every process it starts is stopped before it
// returns, whatever happens.
func run(ctx context.Context, cfg config, out io.Writer) error {
	dir, err := os.MkdirTemp("", "troop-perf-store-")
	if err != nil {
		return err
	}
	ps := &procSet{dir: dir}
	keepDir := false
	defer func() {
		ps.stopAll()
		if !keepDir {
			os.RemoveAll(dir)
		}
	}()

	bins, err := findBinaries(cfg)
	if err != nil {
		return err
	}
	revision := "" // the source the harness built troop from
	if cfg.Troop != "" {
		// processes start in the run's directory, so a relative path would not resolve
		if bins.troop, err = filepath.Abs(cfg.Troop); err != nil {
			return err
		}
	} else if bins.troop, revision, err = prepareTroop(ctx, cfg.Rev, dir, out); err != nil {
		return err
	}
	baseRevision := ""
	if cfg.Base != "" {
		baseDir := filepath.Join(dir, "base")
		if err := os.Mkdir(baseDir, 0o755); err != nil {
			return err
		}
		if bins.base, baseRevision, err = prepareTroop(ctx, cfg.Base, baseDir, out); err != nil {
			return err
		}
	}
	res := &result{Tool: "perf/store", Started: time.Now().UTC(), Config: cfg, Env: environment(ctx, bins, revision), Notes: []string{}}
	res.Env.BaseRevision = baseRevision
	printHeader(out, res)

	if cfg.Proxy {
		err = proxyExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll() // the cluster needs the CPU and memory
	}
	if err == nil && cfg.Cluster {
		err = clusterExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Peers {
		err = peersExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.TLS {
		err = tlsExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Consensus {
		err = consensusExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Repair {
		err = writePathExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Repair {
		err = antiEntropyExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Bulk > 0 {
		err = bulkExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Commands > 0 {
		err = commandsExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Memory {
		err = memoryExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.Latency {
		err = latencyExperiment(ctx, cfg, ps, bins, res, out)
		ps.stopAll()
	}
	if err == nil && cfg.MembershipKeys > 0 {
		err = membershipExperiment(ctx, cfg, ps, bins, res, out)
	}
	if err != nil {
		keepDir = true
		res.Error = err.Error()
		res.note("process logs and configs kept in %s", dir)
	}
	res.Finished = time.Now().UTC()
	res.Summary = summarize(res.Rounds)
	res.Checks = append(append(evaluate(res.Summary, res.Rounds), bulkCheck(res.Bulk)...), commandsCheck(res.Commands)...)
	res.Checks = append(res.Checks, memoryCheck(res.Memory, time.Duration(cfg.MemoryAfter))...)
	res.Checks = append(res.Checks, latencyCheck(res.Latency)...)
	res.Checks = append(res.Checks, consensusCheck(res.Rounds, cfg.Pipelines)...)
	res.Checks = append(res.Checks, peersCheck(res.Summary, res.Rounds, res.Peers)...)
	printSummary(out, res)
	if werr := writeJSON(cfg.Out, res); werr != nil {
		return errors.Join(err, werr)
	}
	fmt.Fprintf(out, "\nwrote %s\n", cfg.Out)
	if err != nil {
		return fmt.Errorf("%v (logs in %s)", err, dir)
	}
	if failed := res.rounds(func(rd round) bool { return rd.Error != "" }); failed > 0 {
		keepDir = true
		return fmt.Errorf("%d measured windows failed (see \"error\" in %s; logs in %s)", failed, cfg.Out, dir)
	}
	// An error reply or wrong data is a store bug: its node logs are worth
	// keeping, and the run must not pass.
	if wrong := res.rounds(func(rd round) bool { return rd.ErrorReplies > 0 || rd.BadReplies > 0 }); wrong > 0 {
		keepDir = true
		return fmt.Errorf("%d measured windows got error replies or wrong data (see the table; logs in %s)", wrong, dir)
	}
	return nil
}
