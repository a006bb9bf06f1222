package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"

	"github.com/troop-lab/troop/node/consistency"
)

// command is one operation of a single-command load: what it sends for key
// number k, how many replies that brings, and whether the last one is right.
// Every operation counts as a write (counts.Sets).
type command struct {
	name    string
	replies int
	key     func(rng *rand.Rand, keys int) int
	append  func(dst []byte, k int) []byte
	ok      func(last []byte, k int) bool
}

// Key ranges the consensus experiment's writes use, beyond the preloaded
// key:0 .. key:keys-1: counters and lists must not meet a 1 KB string, and
// SET NX needs keys that do not exist yet.
const (
	counterKeys = 100_000_000_000
	listKeys    = 200_000_000_000
	freshKeys   = 300_000_000_000
)

// nextFresh numbers SET NX's keys: each is new for the whole run.
var nextFresh atomic.Int64

func preloaded(rng *rand.Rand, keys int) int { return rng.IntN(keys) }

var consensusCommands = []*command{
	{name: "set", replies: 1, key: preloaded, append: appendSet,
		ok: func(last []byte, _ int) bool { return bytes.Equal(last, okReply) }},
	{name: "get", replies: 1, key: preloaded, append: appendGet,
		ok: func(last []byte, k int) bool { return checkGet(last, k) == getHit }},
	{name: "incr", replies: 1, key: func(rng *rand.Rand, keys int) int { return counterKeys + rng.IntN(keys) },
		append: func(dst []byte, k int) []byte {
			dst = append(dst, "*2\r\n$4\r\nINCR\r\n$16\r\n"...)
			return append(appendKey(dst, k), '\r', '\n')
		},
		ok: func(last []byte, _ int) bool { return last[0] == ':' }},
	// LPUSH of its own 16-byte key: many keys and short elements keep the
	// lists, which consensus holds whole, short.
	{name: "lpush", replies: 1, key: func(rng *rand.Rand, keys int) int { return listKeys + rng.IntN(keys) },
		append: func(dst []byte, k int) []byte {
			dst = append(dst, "*3\r\n$5\r\nLPUSH\r\n$16\r\n"...)
			dst = append(appendKey(dst, k), "\r\n$16\r\n"...)
			return append(appendKey(dst, k), '\r', '\n')
		},
		ok: func(last []byte, _ int) bool { return last[0] == ':' }},
	{name: "set_nx", replies: 1, key: func(*rand.Rand, int) int { return freshKeys + int(nextFresh.Add(1)) },
		append: func(dst []byte, k int) []byte {
			start := len(dst)
			dst = appendSet(dst, k)
			dst[start+1] = '4' // *3 -> *4: the same SET with NX after the value
			return append(dst, "$2\r\nNX\r\n"...)
		},
		ok: func(last []byte, _ int) bool { return bytes.Equal(last, okReply) }},
	// A compare-and-set as redis-py's transaction() runs it, pipelined:
	// WATCH, GET, MULTI, SET, EXEC. EXEC answers nil when another client
	// changed the key in between: the load counts that as a nil.
	{name: "watch_cas", replies: 5, key: preloaded,
		append: func(dst []byte, k int) []byte {
			dst = append(dst, "*2\r\n$5\r\nWATCH\r\n$16\r\n"...)
			dst = append(appendKey(dst, k), '\r', '\n')
			dst = appendGet(dst, k)
			dst = append(dst, "*1\r\n$5\r\nMULTI\r\n"...)
			dst = appendSet(dst, k)
			return append(dst, "*1\r\n$4\r\nEXEC\r\n"...)
		},
		ok: func(last []byte, _ int) bool { return bytes.Equal(last, []byte("*1\r\n+OK\r\n")) }},
}

// execAborted is EXEC's reply when a watched key changed.
var execAborted = []byte("*-1\r\n")

// consensusExperiment measures what deciding read-modify-writes by
// consensus costs: on the three-rack cluster at DC_QUORUM, SET, GET, INCR,
// LPUSH, SET NX on new keys and a WATCH compare-and-set, each alone,
// interleaved round by round; each is reported as a ratio to SET in the
// same round. With a base build, its SET and GET run in the same rounds.
func consensusExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	cluster, err := startCluster(ctx, cfg, ps, bins.redisServer, bins.troop, "", false, consistency.DCOne)
	if err != nil {
		return err
	}
	quorum := cluster[1]
	var targets []*target
	for _, c := range consensusCommands {
		t := *quorum
		t.name, t.cmd = c.name, c
		targets = append(targets, &t)
	}
	if bins.base != "" {
		base, err := startCluster(ctx, cfg, ps, bins.redisServer, bins.base, "base_", false, consistency.DCOne)
		if err != nil {
			return err
		}
		for _, c := range consensusCommands[:2] { // set, get
			t := *base[1]
			t.name, t.cmd = "base_"+c.name, c
			targets = append(targets, &t)
		}
	}
	for _, p := range cfg.Pipelines {
		for n := 1; n <= cfg.Rounds; n++ {
			for _, t := range roundOrder(targets, n, 1) {
				res.add(measure(ctx, cfg, "consensus", t, p, n), log)
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
	}
	return ctx.Err()
}

// consensusCheck holds INCR, LPUSH, SET NX and the WATCH compare-and-set at
// DC_QUORUM to at least half of SET's throughput, and, with a base build,
// this build's GET and SET to within 5% of the base's, round by round.
func consensusCheck(rounds []round, depths []int) []check {
	var out []check
	for _, p := range depths {
		for _, c := range consensusCommands[2:] {
			med, lo, hi, n := pairedRatio(rounds, "consensus", p, c.name, "set", opsPerSec)
			if n == 0 {
				continue
			}
			out = append(out, check{Name: fmt.Sprintf("consensus: %s >= 0.5 x SET throughput at DC_QUORUM, P=%d", c.name, p), Kind: "target",
				Measured: med, Limit: 0.5, Pass: med >= 0.5,
				Text: fmt.Sprintf("%s at %.2f of SET, round by round (%.2f to %.2f, %d rounds)", c.name, med, lo, hi, n)})
		}
		for _, c := range consensusCommands[:2] {
			med, lo, hi, n := pairedRatio(rounds, "consensus", p, c.name, "base_"+c.name, opsPerSec)
			if n == 0 {
				continue
			}
			out = append(out, check{Name: fmt.Sprintf("consensus: %s at DC_QUORUM >= 0.95 x the base build's, P=%d", c.name, p), Kind: "target",
				Measured: med, Limit: 0.95, Pass: med >= 0.95,
				Text: fmt.Sprintf("this build's %s at %.3f of the base's, round by round (%.3f to %.3f, %d rounds)", c.name, med, lo, hi, n)})
		}
	}
	return out
}
