package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// repairer copies the newest version of a key from one replica to stale
// ones, for read repair and anti-entropy (docs/repair.md). A copy is the
// key's DUMP with its version and expiry, fetched from the source replica
// (fetchScript) and installed on the target by repairScript, which never
// replaces a newer version: a write that lands meanwhile wins.
type repairer struct {
	n     *Node
	slots chan struct{} // read repairs under way, bounded
}

// readRepairDelay lets writes still in flight reach the stale replica
// before it is repaired, so that a write that is merely late is not
// mistaken for a missed one (for writes that are not last-writer-wins,
// such as INCR, copying first and applying the late write after would
// apply it twice).
const readRepairDelay = 200 * time.Millisecond

const maxReadRepairs = 256

func newRepairer(n *Node) *repairer {
	return &repairer{n: n, slots: make(chan struct{}, maxReadRepairs)}
}

// copyOf is a key as fetchScript returns it.
type copyOf struct {
	version, dump []byte
	pttl, vpttl   int64
}

// countFunc sees the bytes of a peer request and its reply.
type countFunc func(req, raw []byte)

// fetch reads key's copy from replica m.
func (r *repairer) fetch(m *member, key []byte, count countFunc, done func(copyOf, error)) {
	parse := func(raw []byte, err error) {
		if err != nil {
			done(copyOf{}, err)
			return
		}
		v, err := resp.Parse(raw)
		if err != nil || v.IsError() || len(v.Elems) != 4 {
			done(copyOf{}, fmt.Errorf("fetch %q from %s: unexpected reply %s", key, replicaName(m), v))
			return
		}
		done(copyOf{version: v.Elems[0].Str, dump: v.Elems[1].Str, pttl: v.Elems[2].Int, vpttl: v.Elems[3].Int}, nil)
	}
	if m.self {
		r.n.storeFor(key).Do(appendFetch(nil, key), parse)
		return
	}
	if m.isDown() {
		done(copyOf{}, errMarkedDown(m))
		return
	}
	req := resp.AppendCommand(nil, []byte("FETCH"), key)
	m.link.Do(req, fromPeer(func(raw []byte, err error) {
		if count != nil {
			count(req, raw)
		}
		parse(raw, err)
	}))
}

// install writes a copy onto replica m; changed says whether m took it.
func (r *repairer) install(m *member, key []byte, c copyOf, count countFunc, done func(changed bool, err error)) {
	r.installAs("REPAIR", m, key, c, count, done)
}

// installAs is install by peer request op: REPAIR, or HANDOFF for the
// copies of a membership change, which the receiver takes as a REPAIR and
// never mirrors again.
func (r *repairer) installAs(op string, m *member, key []byte, c copyOf, count countFunc, done func(changed bool, err error)) {
	parse := func(raw []byte, err error) {
		if err != nil {
			done(false, err)
			return
		}
		v, err := resp.Parse(raw)
		if err != nil || v.IsError() {
			done(false, fmt.Errorf("repair %q on %s: %s", key, replicaName(m), raw))
			return
		}
		done(v.Int == 1, nil)
	}
	if m.self {
		r.n.repairLocal(nil, key, c, op == "REPAIR", parse)
		return
	}
	if m.isDown() {
		done(false, errMarkedDown(m))
		return
	}
	req := resp.AppendCommand(nil, []byte(op), key, c.version, c.dump,
		[]byte(strconv.FormatInt(c.pttl, 10)), []byte(strconv.FormatInt(c.vpttl, 10)))
	m.link.Do(req, fromPeer(func(raw []byte, err error) {
		if count != nil {
			count(req, raw)
		}
		parse(raw, err)
	}))
}

// copyKey copies key from replica src to the targets; done gets how many
// targets changed, and the first error. count (may be nil) sees the peer
// traffic.
func (r *repairer) copyKey(key []byte, src *member, targets []*member, count countFunc, done func(changed int, err error)) {
	r.copyKeyAs("REPAIR", key, src, targets, count, done)
}

// copyKeyAs is copyKey with the peer request op (installAs).
func (r *repairer) copyKeyAs(op string, key []byte, src *member, targets []*member, count countFunc, done func(changed int, err error)) {
	r.fetch(src, key, count, func(c copyOf, err error) {
		if err != nil {
			done(0, err)
			return
		}
		if len(c.version) == 0 { // nothing troop wrote: nothing to copy
			done(0, nil)
			return
		}
		results := make(chan error, len(targets))
		changed := make(chan bool, len(targets))
		for _, t := range targets {
			r.installAs(op, t, key, c, count, func(ch bool, err error) { changed <- ch; results <- err })
		}
		go func() {
			n := 0
			var first error
			for range targets {
				if <-changed {
					n++
				}
				if err := <-results; err != nil && first == nil {
					first = err
				}
			}
			done(n, first)
		}()
	})
}

// writeBack copies key, at version or newer, from replica src to the
// targets before a quorum read answers, and calls done once need of them
// hold it (or a newer version), or with the reason they cannot. It is the
// second phase of an ABD read: the answer must be on a quorum before it is
// given, or a later read could miss it. src's copy is fetched anew; one
// older than version means src lost the value since it answered.
func (r *repairer) writeBack(key []byte, src *member, version []byte, targets []*member, need int, done func(error)) {
	r.fetch(src, key, nil, func(c copyOf, err error) {
		if err == nil && bytes.Compare(c.version, version) < 0 {
			err = fmt.Errorf("%s no longer holds version %s", replicaName(src), version)
		}
		if err != nil {
			done(err)
			return
		}
		var mu sync.Mutex
		held, failed := 0, 0
		var reasons []string
		for _, t := range targets {
			r.install(t, key, c, nil, func(changed bool, err error) {
				if changed {
					r.n.stats.readRepairs.Add(1)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					reasons = append(reasons, replicaName(t)+": "+err.Error())
				} else {
					held++
				}
				switch {
				case err == nil && held == need:
					done(nil)
				case err != nil && failed == len(targets)-need+1:
					done(errors.New(strings.Join(reasons, "; ")))
				}
			})
		}
	})
}

// readRepair repairs the stale replicas a quorum read of one key found, in
// the background, after readRepairDelay.
func (r *repairer) readRepair(key []byte, replicas []*member, answers []consistency.Reply, idx []int) {
	if !r.n.cfg.ReadRepair || len(answers) < 2 {
		return
	}
	source, stale, _ := consistency.Resolve(answers)
	if len(stale) == 0 {
		return
	}
	var targets []*member
	for _, s := range stale {
		targets = append(targets, replicas[idx[s]])
	}
	select {
	case r.slots <- struct{}{}:
	default:
		r.n.stats.readRepairsLost.Add(int64(len(targets)))
		return
	}
	key = append([]byte(nil), key...)
	src := replicas[idx[source]]
	time.AfterFunc(readRepairDelay, func() {
		r.copyKey(key, src, targets, nil, func(changed int, err error) {
			defer func() { <-r.slots }() // a settle holds its slot too
			r.n.stats.readRepairs.Add(int64(changed))
			if promised(err) {
				err = r.settle(key)
			}
			if err != nil {
				r.n.stats.readRepairsLost.Add(1)
				r.n.log.Debug("read repair failed", "key", printableArg(key), "err", err)
			}
		})
	})
}

// promised says whether err is a replica refusing a copy below a key's
// promise: a change by consensus was promised above the newest version
// and not decided (or not yet everywhere).
func promised(err error) bool {
	return err != nil && strings.Contains(err.Error(), promisedCode+" troop:")
}

// settle reads key by consensus among its replicas (consensusRead), for a
// repair that met a promise: a change promised and abandoned (its proposer
// gave up) refuses every copy below its promise, so copying alone would
// leave the replicas differing for good. The read finishes or supersedes
// that change on a quorum and forwards the value decided to the others.
func (r *repairer) settle(key []byte) error {
	done := make(chan []byte, 1)
	r.n.consensusRead(nil, consistency.DCQuorum, key, [][]byte{[]byte("EXISTS"), key}, r.n.replicas(key), func(reply []byte) { done <- reply })
	reply := <-done
	if v, err := resp.Parse(reply); err != nil || v.IsError() {
		return fmt.Errorf("read by consensus: %.200s", reply)
	}
	return nil
}

// antiEntropyLoop runs an anti-entropy pass every
// troop_anti_entropy_interval_ms (never when it is 0).
func (r *repairer) antiEntropyLoop(ctx context.Context) {
	every := r.n.cfg.AntiEntropyInterval
	if every <= 0 {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rep, err := r.n.AntiEntropy(ctx)
		if err != nil {
			r.n.log.Warn("anti-entropy pass failed", "err", err)
			continue
		}
		r.n.log.Info("anti-entropy pass", "keys_compared", rep.KeysCompared, "differing", rep.Differing, "repaired", rep.Repaired,
			"bytes", rep.Bytes, "took", rep.Took)
	}
}

func appendFetch(dst, key []byte) []byte {
	dst = resp.AppendArrayHeader(dst, 5)
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, fetchSHA)
	dst = resp.AppendBulkString(dst, "2")
	dst = resp.AppendBulk(dst, key)
	return appendVersionKey(dst, key)
}

// repairLocal installs copy c of key on this node's redis-server, unless
// it holds a newer version. During a membership change a repair that
// changed a moving key is mirrored to its other owner, as a write is
// (applyWrite), when mirror says so: a HANDOFF, the change's own copy,
// never is.
func (n *Node) repairLocal(b *batch, key []byte, c copyOf, mirror bool, done func([]byte, error)) {
	n.versions.record(key, c.version, mayExpire)
	if mirror {
		unmirrored, mirrored := done, n.mirrorAfter(n.view(), c.version, [][]byte{key}, done)
		done = func(raw []byte, err error) {
			if err == nil && string(raw) == ":1\r\n" {
				mirrored(raw, err)
				return
			}
			unmirrored(raw, err)
		}
	}
	b.send(n.storeFor(key), appendRepair(nil, key, c), done)
}

func appendRepair(dst, key []byte, c copyOf) []byte {
	dst = resp.AppendArrayHeader(dst, 9)
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, repairSHA)
	dst = resp.AppendBulkString(dst, "2")
	dst = resp.AppendBulk(dst, key)
	dst = appendVersionKey(dst, key)
	dst = resp.AppendBulk(dst, c.version)
	dst = resp.AppendBulk(dst, c.dump)
	dst = resp.AppendBulkString(dst, strconv.FormatInt(c.pttl, 10))
	return resp.AppendBulkString(dst, strconv.FormatInt(c.vpttl, 10))
}
