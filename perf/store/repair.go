package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"github.com/troop-lab/troop/node"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// The repair experiments (docs/performance.md):
//
//   - writes, writes_one_down: DC_QUORUM SETs on three three-rack clusters
//     side by side: "on" with hinted handoff, read repair and versions on
//     (the defaults), "versioned" with versions only, "off" with all three
//     off (plain commands, as Dynomite writes), interleaved; then the same
//     with the
//     third node of each cluster stopped, so that every write leaves a hint
//     on disk in the first and is simply lost for that replica in the second.
//   - anti-entropy: a three-rack cluster holding --ae-keys keys, of which
//     --ae-diff are made to differ on one replica behind troop's back; one
//     pass finds and repairs them, and a second pass checks that nothing is
//     left. Time and bytes exchanged come from the pass's own report.

// repairCluster is a three-rack cluster of the repair experiments.
type repairCluster struct {
	name           string
	cfgs           []*topology.Config
	nodes, redises []*proc
	addrs, admin   []string
}

func startRepairCluster(ctx context.Context, cfg config, ps *procSet, bins binaries, prefix string, configure func(*topology.Config)) (*repairCluster, error) {
	rc := &repairCluster{name: prefix}
	for i := 1; i <= 3; i++ {
		redis, redisAddr, err := startRedis(ctx, ps, bins.redisServer, fmt.Sprintf("%s-redis%d", prefix, i))
		if err != nil {
			return nil, err
		}
		c, err := nodeConfig(fmt.Sprintf("%s-node%d", prefix, i), fmt.Sprintf("rack%d", i), redisAddr, cfg.Pprof != "")
		if err != nil {
			return nil, err
		}
		c.WriteConsistency, c.ReadConsistency = consistency.DCQuorum, consistency.DCQuorum
		// The experiment runs anti-entropy passes itself and measures them:
		// no background pass may repair first.
		c.AntiEntropyInterval = 0
		configure(c)
		rc.redises, rc.cfgs = append(rc.redises, redis), append(rc.cfgs, c)
		rc.addrs, rc.admin = append(rc.addrs, c.Listen), append(rc.admin, c.StatsListen)
	}
	linkSeeds(rc.cfgs)
	for _, c := range rc.cfgs {
		node, err := startNode(ctx, ps, bins.troop, c)
		if err != nil {
			return nil, err
		}
		rc.nodes = append(rc.nodes, node)
	}
	return rc, waitPeers(ctx, rc.nodes, rc.admin)
}

func writePathExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	on, err := startRepairCluster(ctx, cfg, ps, bins, "on", func(c *topology.Config) {
		c.MaxHintBytes = 2_000_000_000 // no hint dropped in the windows: every write pays for its hint
	})
	if err != nil {
		return err
	}
	versioned, err := startRepairCluster(ctx, cfg, ps, bins, "versioned", func(c *topology.Config) {
		c.HintedHandoff, c.ReadRepair = false, false
	})
	if err != nil {
		return err
	}
	off, err := startRepairCluster(ctx, cfg, ps, bins, "off", func(c *topology.Config) {
		c.HintedHandoff, c.ReadRepair, c.Versions = false, false, false
	})
	if err != nil {
		return err
	}
	clusters := []*repairCluster{on, versioned, off}
	quorum := [][]string{{"TROOP", "CONSISTENCY", "DC_QUORUM"}}
	for _, rc := range clusters {
		if err := preload(ctx, rc.addrs, nil, cfg.Keys, quorum); err != nil {
			return err
		}
	}
	run := func(exp string, upTo int) error {
		var targets []*target
		for _, rc := range clusters {
			targets = append(targets, &target{name: rc.name, addrs: rc.addrs[:upTo], setup: quorum, proxies: rc.nodes[:upTo],
				redis: rc.redises, admin: rc.admin, writes: true})
		}
		for _, p := range cfg.Pipelines {
			for n := 1; n <= cfg.Rounds; n++ {
				for _, t := range targets {
					res.add(measure(ctx, cfg, exp, t, p, n), log)
					if err := ctx.Err(); err != nil {
						return err
					}
				}
			}
			if cfg.Pprof != "" {
				for _, t := range targets {
					if err := profile(ctx, cfg, t, p, fmt.Sprintf("%s-%s-P%d-node1.pprof", exp, t.name, p)); err != nil {
						res.note("profile of %s at P=%d failed: %v", t.name, p, err)
					}
				}
			}
		}
		return nil
	}
	if err := run("writes", 3); err != nil {
		return err
	}
	for _, rc := range clusters[:2] {
		noteScriptless(ctx, rc, res)
	}
	// The third node of each stops; the two others coordinate every write.
	for _, rc := range clusters {
		rc.nodes[2].stop()
	}
	if err := sleep(ctx, 3*time.Second); err != nil { // until the detectors mark it down
		return err
	}
	if err := run("writes_one_down", 2); err != nil {
		return err
	}
	pending := int64(0)
	for _, a := range on.admin[:2] {
		var info struct {
			HintsPending int64 `json:"hints_pending"`
			HintsDropped int64 `json:"hints_dropped"`
		}
		if err := getJSON(ctx, "http://"+a+"/info", &info); err == nil {
			pending += info.HintsPending
			if info.HintsDropped > 0 {
				res.note("%s dropped %d hints in the one-down windows", a, info.HintsDropped)
			}
		}
	}
	res.note("writes_one_down: %d hints pending on the 'on' cluster after its windows", pending)
	return nil
}

// noteScriptless notes how many of a versioned cluster's replica writes,
// preload included, went as MSET without the write script: every SET is
// written on the three replicas.
func noteScriptless(ctx context.Context, rc *repairCluster, res *result) {
	var scriptless, sets int64
	for _, a := range rc.admin {
		var info struct {
			ScriptlessWrites int64            `json:"scriptless_writes"`
			Commands         map[string]int64 `json:"commands"`
		}
		if err := getJSON(ctx, "http://"+a+"/info", &info); err != nil {
			res.note("%s: /info: %v", a, err)
			return
		}
		scriptless += info.ScriptlessWrites
		sets += info.Commands["SET"]
	}
	if sets > 0 {
		res.note("writes: %d of the '%s' cluster's %d replica writes (%.1f%%) went without the write script",
			scriptless, rc.name, 3*sets, 100*float64(scriptless)/float64(3*sets))
	}
}

// aeResult is the anti-entropy experiment's outcome.
type aeResult struct {
	Keys           int             `json:"keys"`
	Differing      int             `json:"differing_made"` // half lost, half changed behind troop's back
	PreloadSeconds float64         `json:"preload_seconds"`
	First          json.RawMessage `json:"first_pass"`  // the node's report
	Second         json.RawMessage `json:"second_pass"` // after the first repaired everything
	Converged      bool            `json:"converged"`   // the second pass found no difference
}

func antiEntropyExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	rc, err := startRepairCluster(ctx, cfg, ps, bins, "ae", func(c *topology.Config) {
		c.RepairKeysPerSec = 100_000
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "anti-entropy: preloading %d keys at DC_QUORUM ...\n", cfg.AEKeys)
	start := time.Now()
	if err := preload(ctx, rc.addrs, nil, cfg.AEKeys, [][]string{{"TROOP", "CONSISTENCY", "DC_QUORUM"}}); err != nil {
		return err
	}
	ae := &aeResult{Keys: cfg.AEKeys, Differing: cfg.AEDiff, PreloadSeconds: time.Since(start).Seconds()}
	res.AntiEntropy = ae
	// DC_QUORUM acknowledges after two replicas: let the third catch up
	// before making differences on purpose.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	if err := divergeReplica(ctx, rc.cfgs[2].Servers[0].Addr, cfg.AEKeys, cfg.AEDiff, cfg.Seed); err != nil {
		return err
	}
	for i, into := range []*json.RawMessage{&ae.First, &ae.Second} {
		fmt.Fprintf(log, "anti-entropy: pass %d ...\n", i+1)
		raw, err := postRaw(ctx, "http://"+rc.admin[0]+"/repair")
		if err != nil {
			return fmt.Errorf("anti-entropy pass %d: %w", i+1, err)
		}
		*into = raw
		fmt.Fprintf(log, "  %s\n", compactJSON(raw))
	}
	var second struct {
		Differing int64 `json:"differing"`
	}
	json.Unmarshal(ae.Second, &second)
	ae.Converged = second.Differing == 0
	return nil
}

// divergeReplica makes diff keys of one replica differ, behind troop's
// back: the even ones lose value and version (a replica that missed them),
// the odd ones get other bytes at the same version (changed by hand).
func divergeReplica(ctx context.Context, redisAddr string, keys, diff int, seed uint64) error {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", redisAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 6))
	chosen := map[int]bool{}
	for len(chosen) < diff {
		chosen[rng.IntN(keys)] = true
	}
	var buf []byte
	i := 0
	for k := range chosen {
		key := string(appendKey(nil, k))
		if i%2 == 0 {
			buf = resp.AppendCommandStrings(buf, "DEL", key, node.VersionPrefix+key)
		} else {
			buf = resp.AppendCommandStrings(buf, "SET", key, "changed by hand")
		}
		i++
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(buf); err != nil {
		return err
	}
	rd := resp.NewReader(c, resp.DefaultLimits)
	for range diff {
		raw, err := rd.ReadRaw(nil)
		if err != nil {
			return err
		}
		if raw[0] == '-' {
			return fmt.Errorf("diverging %s: %s", redisAddr, raw)
		}
	}
	return nil
}

func postRaw(ctx context.Context, url string) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s %s", url, res.Status, body)
	}
	return compactJSON(body), nil
}

func getJSON(ctx context.Context, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return json.NewDecoder(res.Body).Decode(into)
}

func compactJSON(b []byte) json.RawMessage {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return json.RawMessage(b)
	}
	out, _ := json.Marshal(v)
	return out
}
